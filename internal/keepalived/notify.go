package keepalived

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// NotifyFIFO is where keepalived.conf's notify_fifo points: keepalived
// writes one line per VRRP state change there, and ipfailover reads them to
// know, at once and in order, which instances are MASTER on this node. It
// sits beside keepalived's pid file. A keepalived that cannot open it logs
// "Unable to create notify fifo" and runs on without it.
const NotifyFIFO = "/run/keepalived-notify.fifo"

// State is a VRRP instance's state as keepalived names it in its notify
// FIFO.
type State string

// The states keepalived 2.2.7 writes for an instance: BACKUP and MASTER,
// FAULT, and STOP when it shuts down.
const (
	StateNameBackup State = "BACKUP"
	StateNameMaster State = "MASTER"
	StateNameFault  State = "FAULT"
	StateNameStop   State = "STOP"
)

// Notification is one line of the notify FIFO about a vrrp_instance:
//
//	INSTANCE "demo_VIP_1" MASTER 254
type Notification struct {
	Instance string
	State    State
	Priority int
}

// errNotInstance marks a FIFO line about something other than a
// vrrp_instance (a sync group, a virtual server), which ReadNotifications
// skips.
var errNotInstance = errors.New("not about a vrrp_instance")

// parseNotification parses one line of keepalived's notify FIFO. Lines
// about sync groups and virtual servers give an error wrapping
// errNotInstance; anything that is not keepalived's format is an error that
// quotes the line.
func parseNotification(line string) (Notification, error) {
	kind, rest, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
	if kind != "INSTANCE" {
		if kind == "GROUP" || kind == "VS" || kind == "RS" || kind == "CHECKER" {
			return Notification{}, fmt.Errorf("notify line %q: %w", line, errNotInstance)
		}
		return Notification{}, fmt.Errorf("notify line %q: want INSTANCE \"name\" STATE priority", line)
	}
	// The name is quoted and may not contain a quote (keepalived's
	// instance names are single words, ours are [A-Za-z0-9_]).
	if !strings.HasPrefix(rest, `"`) {
		return Notification{}, fmt.Errorf("notify line %q: instance name not quoted", line)
	}
	name, rest, ok := strings.Cut(rest[1:], `"`)
	if !ok || name == "" {
		return Notification{}, fmt.Errorf("notify line %q: instance name not quoted", line)
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return Notification{}, fmt.Errorf("notify line %q: want a state and a priority after the name", line)
	}
	n := Notification{Instance: name, State: State(fields[0])}
	if len(fields) == 2 {
		p, err := strconv.Atoi(fields[1])
		if err != nil || p < 0 || p > 255 {
			return Notification{}, fmt.Errorf("notify line %q: priority %q is not 0..255", line, fields[1])
		}
		n.Priority = p
	}
	return n, nil
}

// OpenNotifyFIFO makes the FIFO at path (unless it exists) and opens it for
// reading before keepalived starts, so that no line is lost. It opens it
// read-write: a FIFO with a writer never reports end of file, so a
// keepalived that restarts, and closes and opens its end, is read on without
// a gap. Close the returned file to stop a Read in progress.
func OpenNotifyFIFO(path string) (*os.File, error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("making the notify FIFO %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("notify FIFO: %w", err)
	}
	if fi.Mode()&os.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("notify FIFO %s exists and is not a FIFO (%s)", path, fi.Mode().Type())
	}
	// Non-blocking, so the file joins Go's poller and Close ends a Read.
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the notify FIFO: %w", err)
	}
	return f, nil
}

// ReadNotifications reads the notify FIFO r until it fails (a closed
// file), calling fn for every instance line. Lines about other subjects
// are skipped; a malformed line goes to bad, and reading goes on.
func ReadNotifications(r io.Reader, fn func(Notification), bad func(error)) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n, err := parseNotification(sc.Text())
		switch {
		case err == nil:
			fn(n)
		case errors.Is(err, errNotInstance):
		default:
			bad(err)
		}
	}
	return sc.Err()
}
