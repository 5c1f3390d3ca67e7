package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/config"
)

// logLines records log lines.
type logLines struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// since returns the lines logged at or after t, each as its time after t, its message and
// its attributes key=value.
func (l *logLines) since(t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Time.Before(t) {
			continue
		}
		line := fmt.Sprintf("%s %s", r.Time.Sub(t), r.Message)
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.String()
			return true
		})
		out = append(out, line)
	}
	return out
}

// faultRig is a faultReminder on fake sources, in a synctest bubble.
type faultRig struct {
	mu           sync.Mutex
	faults       []string
	since        time.Time
	err          error
	checkFailing bool
	flags        net.Flags
	looks        int

	logs *logLines
}

// lookCount is how often the reminder looked at keepalived's instances.
func (f *faultRig) lookCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.looks
}

func (f *faultRig) set(change func(f *faultRig)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// start runs a reminder until the test ends.
func (f *faultRig) start(t *testing.T, script string) {
	f.logs = &logLines{}
	r := &faultReminder{
		instances: func() ([]string, time.Time, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.looks++
			return f.faults, f.since, f.err
		},
		checkFailing: func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.checkFailing
		},
		link: func(name string) (net.Flags, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if name != "eth0" {
				return 0, errors.New("no such interface")
			}
			return f.flags, nil
		},
		iface:  "eth0",
		script: script,
		log:    slog.New(f.logs),
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		r.run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

const up = net.FlagUp | net.FlagRunning

// TestFaultToldOnceAMinute: instances in FAULT are told a minute after they were first seen
// and every minute after that, on the minute, with the cause; once when they left FAULT; and
// then nothing.
func TestFaultToldOnceAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		f := &faultRig{flags: net.FlagUp}
		f.start(t, "")
		time.Sleep(5 * time.Second)
		entered := time.Now()
		f.set(func(f *faultRig) { f.faults, f.since = []string{"VIP_1", "VIP_2"}, entered })
		time.Sleep(3*time.Minute + 30*time.Second)
		f.set(func(f *faultRig) { f.faults, f.flags = nil, up })
		time.Sleep(5 * time.Minute)

		// Looks at 10 s, 20 s, ...: the FAULT is first seen at 10 s.
		const msg = "keepalived holds instances in FAULT: this node takes none of their VIPs until they leave it instances=VIP_1,VIP_2"
		const cause = `cause=interface eth0 has no carrier`
		want := []string{
			fmt.Sprintf("1m10s %s failing_for=1m5s %s", msg, cause),
			fmt.Sprintf("2m10s %s failing_for=2m5s %s", msg, cause),
			fmt.Sprintf("3m10s %s failing_for=3m5s %s", msg, cause),
			"3m40s keepalived's instances left FAULT instances=VIP_1,VIP_2 failed_for=3m35s",
		}
		if diff := cmp.Diff(want, f.logs.since(start)); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
		if most := int(time.Since(start)/faultLook) + 1; f.lookCount() > most {
			t.Errorf("looked %d times in %s, want at most %d", f.lookCount(), time.Since(start), most)
		}
	})
}

// TestFaultCause: what the reminder says of the cause.
func TestFaultCause(t *testing.T) {
	for _, tt := range []struct {
		name   string
		flags  net.Flags
		script string
		want   string
	}{
		{"down", 0, "", "interface eth0 is down"},
		{"down, with a script", 0, "/bin/true", "interface eth0 is down"},
		{"no carrier", net.FlagUp, "", "interface eth0 has no carrier"},
		{"a script", up, "/usr/bin/true", "interface eth0 is up: the check script fails, or keepalived cannot run it (OPENSHIFT_HA_CHECK_SCRIPT=/usr/bin/true)"},
		{"not known", up, "", "interface eth0 is up: keepalived's lines as it entered FAULT say why"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &faultRig{flags: tt.flags, faults: []string{"VIP_1"}}
				f.start(t, tt.script)
				time.Sleep(faultLook + faultRemind + faultLook/2)
				lines := f.logs.since(time.Time{})
				if len(lines) != 1 || !strings.HasSuffix(lines[0], " cause="+tt.want) {
					t.Errorf("log %q, want one line ending in cause=%s", lines, tt.want)
				}
			})
		})
	}
}

// TestFaultNotTold: a FAULT shorter than a minute, one while the built-in check fails (it
// tells its own), and a keepalived that cannot be asked leave the log alone.
func TestFaultNotTold(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(f *faultRig)
		undo   func(f *faultRig)
	}{
		{"shorter than a minute",
			func(f *faultRig) { f.faults = []string{"VIP_1"} },
			func(f *faultRig) { f.faults = nil }},
		{"the check's",
			func(f *faultRig) { f.faults, f.checkFailing = []string{"VIP_1"}, true },
			func(f *faultRig) { f.faults, f.checkFailing = nil, false }},
		{"keepalived not running",
			func(f *faultRig) { f.faults, f.err = nil, errNotRunning },
			func(f *faultRig) { f.err = nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &faultRig{flags: up}
				f.start(t, "")
				f.set(tt.change)
				d := 5 * time.Minute
				if tt.name == "shorter than a minute" {
					d = faultRemind - time.Second
				}
				time.Sleep(d)
				f.set(tt.undo)
				time.Sleep(5 * time.Minute)
				if lines := f.logs.since(time.Time{}); len(lines) > 0 {
					t.Errorf("logged:\n%s", strings.Join(lines, "\n"))
				}
			})
		})
	}
}

// TestFaultAfterTheCheck: a FAULT the reminder has seen, then the check's for minutes, then
// no longer the check's: it is told at the first look after the check passes, then every
// minute on the minute of its first sight; the looks stay faultLook apart meanwhile.
func TestFaultAfterTheCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		f := &faultRig{flags: 0, faults: []string{"VIP_1"}}
		f.start(t, "")
		time.Sleep(30 * time.Second)
		f.set(func(f *faultRig) { f.checkFailing = true })
		time.Sleep(4*time.Minute + 35*time.Second)
		f.set(func(f *faultRig) { f.checkFailing = false })
		time.Sleep(2*time.Minute + 10*time.Second)
		var got []string
		for _, l := range f.logs.since(start) {
			at, _, _ := strings.Cut(l, " ")
			got = append(got, at)
		}
		if diff := cmp.Diff([]string{"5m10s", "6m10s", "7m10s"}, got); diff != "" {
			t.Errorf("times of the lines (-want +got):\n%s", diff)
		}
		if most := int(time.Since(start)/faultLook) + 1; f.lookCount() > most {
			t.Errorf("looked %d times in %s, want at most %d", f.lookCount(), time.Since(start), most)
		}
	})
}

// TestFaultyInstances: the planned instances in FAULT in keepalived's dump, and the earliest
// time one entered it.
func TestFaultyInstances(t *testing.T) {
	f := startFake(t, "two-master.json")
	b, err := os.ReadFile(f.fixture)
	if err != nil {
		t.Fatal(err)
	}
	// T_VIP_2 (planned) and a third, unplanned instance in FAULT.
	s := string(b)
	second := strings.Index(s, `"iname":"T_VIP_2"`)
	s = s[:second] + strings.Replace(s[second:], `"state":2`, `"state":3`, 1)
	s = strings.Replace(s, "[", `[{"data":{"iname":"OTHER","state":3,"last_transition":1.5},"stats":{}},`, 1)
	if err := os.WriteFile(f.fixture, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions(newProcess(f.pid), f.dump)
	o.Plan.Config.Check, o.Plan.Config.CheckScript = config.CheckScript, "/bin/true"
	srv := newServer(t, o)
	names, since, err := srv.faultyInstances()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"T_VIP_2"}, names); diff != "" {
		t.Errorf("instances in FAULT (-want +got):\n%s", diff)
	}
	if want := time.Unix(1795277116, 522441000); since.Sub(want).Abs() > time.Microsecond {
		t.Errorf("in FAULT since %v, want %v (its last_transition)", since, want)
	}
	if srv.checkScript != "/bin/true" {
		t.Errorf("check script %q, want the plan's", srv.checkScript)
	}
	if n := f.signals(t); n != 1 {
		t.Errorf("%d dump signals, want 1", n)
	}
	// A look within faultLook of a dump asks for none.
	if _, _, err := srv.faultyInstances(); err != nil {
		t.Fatal(err)
	}
	if n := f.signals(t); n != 1 {
		t.Errorf("%d dump signals after a second look, want 1", n)
	}
}

// TestOneDumpPerProbe: readiness probes and scrapes at the same time, then the FAULT
// reminder's look, cost keepalived one dump between them.
func TestOneDumpPerProbe(t *testing.T) {
	f := startFake(t, "two-master.json")
	o := testOptions(newProcess(f.pid), f.dump)
	// Past the default, so that a goroutine of the test that starts late on a busy machine
	// still finds the dump.
	o.DumpMaxAge = 5 * time.Second
	srv := newServer(t, o)
	srv.SetReady(true)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if code, body := get(t, srv.handler, "/readyz"); code != http.StatusOK {
				t.Errorf("/readyz: %d %q", code, body)
			}
		})
		wg.Go(func() { get(t, srv.handler, "/metrics") })
	}
	wg.Wait()
	if _, _, err := srv.faultyInstances(); err != nil {
		t.Fatal(err)
	}
	if n := f.signals(t); n != 1 {
		t.Errorf("%d dump signals, want 1", n)
	}
}
