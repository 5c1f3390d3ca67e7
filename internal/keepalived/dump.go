package keepalived

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DumpPath is where keepalived writes its JSON dump: "keepalived.json" in
// its temporary directory, which keepalived 2.2.7 takes from TMPDIR and
// otherwise is /tmp. keepalived inherits this process's environment, so the
// same rule applies here.
func DumpPath() string {
	dir := os.Getenv("TMPDIR")
	if dir == "" {
		dir = "/tmp"
	}
	return filepath.Join(dir, "keepalived.json")
}

// VRRPInstance is one element of keepalived's JSON dump.
type VRRPInstance struct {
	Data struct {
		Name           string  `json:"iname"`
		Interface      string  `json:"ifp_ifname"`
		VRID           int     `json:"vrid"`
		State          int     `json:"state"`
		LastTransition float64 `json:"last_transition"`
		// MasterPriority is the priority of the last master a backup
		// heard (0: none since the instance was set up or reloaded).
		MasterPriority int `json:"master_priority"`
	} `json:"data"`
	// Stats maps keepalived's counter names (advert_rcvd, ip_ttl_err, ...) to their values.
	// keepalived leaves the object out when an instance has no statistics, and leaves
	// authtype_mismatch and auth_failure out when it is built without VRRP authentication.
	Stats map[string]uint64 `json:"stats"`
}

// Values of keepalived's vrrp_t state, as the JSON dump has them.
const (
	StateInit   = 0
	StateBackup = 1
	StateMaster = 2
	StateFault  = 3
)

// ParseDump decodes a keepalived JSON dump in either layout keepalived has written: a bare
// array of {"data":…,"stats":…} objects (every 2.x release, and json_version 1 later), or an
// object whose "vrrp" member is that array (json_version 2, keepalived 2.3 and later).
func ParseDump(b []byte) ([]VRRPInstance, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errors.New("empty dump")
	}
	var out []VRRPInstance
	switch b[0] {
	case '[':
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
	case '{':
		var v2 struct {
			VRRP *[]VRRPInstance `json:"vrrp"`
		}
		if err := json.Unmarshal(b, &v2); err != nil {
			return nil, err
		}
		if v2.VRRP == nil {
			return nil, errors.New(`dump object has no "vrrp" member`)
		}
		out = *v2.VRRP
	default:
		return nil, fmt.Errorf("dump starts with %q, want '[' or '{'", b[0])
	}
	for i, in := range out {
		if in.Data.Name == "" {
			return nil, fmt.Errorf("instance %d of the dump has no iname", i)
		}
	}
	return out, nil
}

// dumpNotice is the line keepalived's VRRP process logs for every JSON dump
// signal it handles, before it writes the dump: "Printing VRRP as json for
// process(<its pid>) on signal". Every 2.x release has it, unconditionally.
const (
	dumpNoticeHead = "Printing VRRP as json for process("
	dumpNoticeTail = ") on signal"
)

// IsDumpNotice reports whether line, with or without its line ending, is
// keepalived's notice of a JSON dump signal: the message alone, or after
// the "<date>: " that --log-console puts before every message (a date of
// letters, digits, spaces, colons and dots). Nothing else matches: not the
// message with more text after it, nor a line that quotes it.
func IsDumpNotice(line []byte) bool {
	line = bytes.TrimRight(line, "\r\n")
	i := bytes.Index(line, []byte(dumpNoticeHead))
	if i < 0 || i > 0 && !isLogDate(line[:i]) {
		return false
	}
	pid, ok := bytes.CutSuffix(line[i+len(dumpNoticeHead):], []byte(dumpNoticeTail))
	return ok && len(pid) > 0 && len(pid) <= 10 && allIn(pid, "0123456789")
}

// isLogDate reports whether prefix is a "<date>: " as keepalived's console
// log puts it before a message.
func isLogDate(prefix []byte) bool {
	date, ok := bytes.CutSuffix(prefix, []byte(": "))
	return ok && len(date) > 0 && len(date) <= 48 && date[0] != ' ' &&
		allIn(date, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 :.")
}

// allIn reports whether every byte of b is one of chars.
func allIn(b []byte, chars string) bool {
	for _, c := range b {
		if strings.IndexByte(chars, c) < 0 {
			return false
		}
	}
	return true
}
