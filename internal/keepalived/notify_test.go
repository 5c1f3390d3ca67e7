package keepalived

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseNotification(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Notification
		other   bool
		wantErr string
	}{
		// The lines keepalived 2.2.7 wrote for two instances started,
		// one becoming master, then stopped.
		{name: "backup at start", line: `INSTANCE "X_VIP_1" BACKUP 200`, want: Notification{"X_VIP_1", StateNameBackup, 200}},
		{name: "master", line: `INSTANCE "OpenShift_IPFailover_VIP_2" MASTER 254` + "\n", want: Notification{"OpenShift_IPFailover_VIP_2", StateNameMaster, 254}},
		{name: "fault", line: `INSTANCE "a" FAULT 1`, want: Notification{"a", StateNameFault, 1}},
		{name: "stop", line: line("X_VIP_2", StateNameStop, 250), want: Notification{"X_VIP_2", StateNameStop, 250}},
		{name: "no priority", line: `INSTANCE "a" MASTER`, want: Notification{"a", StateNameMaster, 0}},
		{name: "a state this program does not know", line: `INSTANCE "a" MASTER_RX_LOWER_PRI 100`, want: Notification{"a", "MASTER_RX_LOWER_PRI", 100}},
		{name: "sync group", line: `GROUP "g" MASTER`, other: true},
		{name: "virtual server", line: `VS "10.0.0.1:80" UP`, other: true},
		{name: "empty", line: ``, wantErr: `want INSTANCE`},
		{name: "garbage", line: `hello world`, wantErr: `want INSTANCE`},
		{name: "unquoted name", line: `INSTANCE a MASTER 1`, wantErr: "not quoted"},
		{name: "open quote", line: `INSTANCE "a MASTER 1`, wantErr: "not quoted"},
		{name: "empty name", line: `INSTANCE "" MASTER 1`, wantErr: "not quoted"},
		{name: "no state", line: `INSTANCE "a"`, wantErr: "want a state"},
		{name: "extra field", line: `INSTANCE "a" MASTER 1 2`, wantErr: "want a state"},
		{name: "bad priority", line: `INSTANCE "a" MASTER x`, wantErr: `priority "x"`},
		{name: "priority out of range", line: `INSTANCE "a" MASTER 256`, wantErr: `priority "256"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNotification(tt.line)
			switch {
			case tt.other:
				if !errors.Is(err, errNotInstance) {
					t.Fatalf("parseNotification(%q) = %v, %v; want an errNotInstance", tt.line, got, err)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.Is(err, errNotInstance) {
					t.Fatalf("parseNotification(%q) error %v, want one containing %q", tt.line, err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("(-want +got)\n%s", diff)
				}
			}
		})
	}
}

func FuzzParseNotification(f *testing.F) {
	f.Add(`INSTANCE "X_VIP_1" BACKUP 200`)
	f.Add(`GROUP "g" MASTER`)
	f.Add(`INSTANCE "a`)
	f.Fuzz(func(t *testing.T, line string) {
		n, err := parseNotification(line)
		if err != nil {
			return
		}
		if n.Instance == "" || strings.Contains(n.Instance, `"`) || n.State == "" || n.Priority < 0 || n.Priority > 255 {
			t.Fatalf("parseNotification(%q) = %+v: an empty or quoted name, no state or a priority out of range", line, n)
		}
	})
}

// TestNotifyFIFO opens the FIFO as ipfailover does before keepalived
// starts, writes to it as keepalived does (its own open, lines, close, and
// a second writer after the first went away: a restarted keepalived), and
// reads every instance line in order; Close ends the reading.
func TestNotifyFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.fifo")
	f, err := OpenNotifyFIFO(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Notification, 10)
	var bad []error
	done := make(chan error, 1)
	go func() {
		done <- ReadNotifications(f, func(n Notification) { got <- n }, func(err error) { bad = append(bad, err) })
	}()
	for _, lines := range []string{
		"INSTANCE \"a\" BACKUP 200\nGROUP \"g\" BACKUP\nINSTANCE \"a\" MASTER 200\n",
		line("a", StateNameStop, 200) + "\nnonsense\nINSTANCE \"b\" BACKUP 100\n",
	} {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(lines); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	want := []Notification{{"a", StateNameBackup, 200}, {"a", StateNameMaster, 200}, {"a", StateNameStop, 200}, {"b", StateNameBackup, 100}}
	for i, w := range want {
		select {
		case n := <-got:
			if n != w {
				t.Errorf("notification %d = %+v, want %+v", i, n, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notification %d (%+v) never came", i, w)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("ReadNotifications after Close = %v, want os.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadNotifications did not return after Close")
	}
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), `"nonsense"`) {
		t.Errorf("malformed lines reported: %v, want one quoting \"nonsense\"", bad)
	}

	// Opening again finds the FIFO and reuses it; a plain file is refused.
	f2, err := OpenNotifyFIFO(path)
	if err != nil {
		t.Fatalf("opening an existing FIFO: %v", err)
	}
	f2.Close()
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenNotifyFIFO(plain); err == nil || !strings.Contains(err.Error(), "not a FIFO") {
		t.Errorf("OpenNotifyFIFO(a plain file) = %v, want an error saying it is not a FIFO", err)
	}
}

// line is a notify FIFO line as keepalived writes it.
func line(instance string, state State, priority int) string {
	return fmt.Sprintf("INSTANCE %q %s %d", instance, state, priority)
}
