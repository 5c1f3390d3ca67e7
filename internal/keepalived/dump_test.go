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
