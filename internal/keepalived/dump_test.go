package keepalived

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDump(t *testing.T) {
	full, err := os.ReadFile("testdata/dumps/two-master.json")
	if err != nil {
		t.Fatal(err)
	}
	full = bytes.TrimSpace(full)
	tests := []struct {
		name    string
		file    string
		data    string
		want    []string // name/intf/vrid/state/advert_sent
		wantErr bool
	}{
		{name: "2.2.7 array", file: "two-master.json", want: []string{"T_VIP_1 va 51 2 4", "T_VIP_2 va 52 2 3"}},
		{name: "2.2.7 backup", file: "two-backup-errors.json", want: []string{"T_VIP_1 vb 51 1 0", "T_VIP_2 vb 52 1 0"}},
		{name: "json_version 2 object", file: "v2-layout.json", want: []string{"T_VIP_1 va 51 2 4", "T_VIP_2 va 52 2 3"}},
		{name: "empty, just renamed", data: "", wantErr: true},
		{name: "half written", data: string(full[:len(full)/2]), wantErr: true},
		{name: "one byte short", data: string(full[:len(full)-1]), wantErr: true},
		{name: "object without vrrp", data: `{"track_process":[]}`, wantErr: true},
		{name: "not json", data: "Printing VRRP data", wantErr: true},
		{name: "instance without name", data: `[{"data":{"vrid":1},"stats":{}}]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.data)
			if tt.file != "" {
				if b, err = os.ReadFile(filepath.Join("testdata", "dumps", tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ParseDump(b)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseDump() = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var short []string
			for _, in := range got {
				short = append(short, strings.Join([]string{in.Data.Name, in.Data.Interface,
					strconv.Itoa(in.Data.VRID), strconv.Itoa(in.Data.State), strconv.Itoa(int(in.Stats["advert_sent"]))}, " "))
			}
			if diff := cmp.Diff(tt.want, short); diff != "" {
				t.Errorf("ParseDump() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIsDumpNotice: keepalived's notice of a dump signal, as --log-console
// writes it, and nothing else, not even lines that quote it.
func TestIsDumpNotice(t *testing.T) {
	for _, tt := range []struct {
		name string
		line string
		want bool
	}{
		{"console line", "Wed Dec  2 10:18:53 2026: Printing VRRP as json for process(18) on signal\n", true},
		{"without a newline", "Wed Dec  2 10:18:53 2026: Printing VRRP as json for process(18) on signal", true},
		{"CRLF", "Wed Dec  2 10:18:53 2026: Printing VRRP as json for process(18) on signal\r\n", true},
		{"message alone", "Printing VRRP as json for process(4194304) on signal\n", true},
		{"the data dump", "Wed Dec  2 10:18:53 2026: Printing VRRP data for process(18) on signal\n", false},
		{"the stats dump", "Wed Dec  2 10:18:53 2026: Printing VRRP stats for process(18) on signal\n", false},
		{"more after it", "Wed Dec  2 10:18:53 2026: Printing VRRP as json for process(18) on signal, twice\n", false},
		{"quoted", "level=INFO msg=\"Printing VRRP as json for process(18) on signal\"\n", false},
		{"glued to a word", "x:Printing VRRP as json for process(18) on signal\n", false},
		{"after a quote", "quoted: \"Wed Dec  2 10:18:53 2026: Printing VRRP as json for process(18) on signal\n", false},
		{"after another message", "(VIP_1) said: Printing VRRP as json for process(18) on signal\n", false},
		{"fractional seconds", "Wed Dec  2 10:18:53.123456 2026: Printing VRRP as json for process(18) on signal\n", true},
		{"no pid", "Printing VRRP as json for process() on signal\n", false},
		{"not a pid", "Printing VRRP as json for process(1a) on signal\n", false},
		{"a state change", "Wed Dec  2 10:18:47 2026: (VIP_2) Entering MASTER STATE\n", false},
		{"empty", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsDumpNotice([]byte(tt.line)); got != tt.want {
				t.Errorf("IsDumpNotice(%q) = %v, want %v", tt.line, got, tt.want)
			}
		})
	}
}
