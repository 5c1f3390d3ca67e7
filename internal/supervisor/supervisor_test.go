package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/internal/proc"
	"github.com/ipfailover/ipfailover/test/syncbuf"
	"github.com/ipfailover/ipfailover/test/wait"
)

// fakeBinary is testdata/fakekeepalived built as ".../keepalived", so that
// its /proc/<pid>/comm is "keepalived" like the real one.
var fakeBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakekeepalived")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBinary = filepath.Join(dir, "keepalived")
	build := exec.Command("go", "build", "-o", fakeBinary, "./testdata/fakekeepalived")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the fake keepalived:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fake is one test's fake keepalived: its control directory.
type fake struct {
	t   *testing.T
	dir string
}

func newFake(t *testing.T) *fake {
	return &fake{t: t, dir: t.TempDir()}
}

// set creates a control file.
func (f *fake) set(name, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// unset removes a control file.
func (f *fake) unset(name string) {
	f.t.Helper()
	if err := os.Remove(filepath.Join(f.dir, name)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fake) env() []string {
	return append(os.Environ(), "FAKE_KEEPALIVED_DIR="+f.dir)
}

// events returns the recorded event lines.
func (f *fake) events() []string {
	b, err := os.ReadFile(filepath.Join(f.dir, "events"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// has reports whether event was recorded.
func (f *fake) has(event string) bool {
	for _, e := range f.events() {
		if e == event {
			return true
		}
	}
	return false
}

// starts returns the pids of the recorded starts, in order.
func (f *fake) starts() []int {
	var pids []int
	for _, e := range f.events() {
		if fields := strings.Fields(e); len(fields) >= 2 && fields[0] == "start" {
			pid, _ := strconv.Atoi(fields[1])
			pids = append(pids, pid)
		}
	}
	return pids
}

// run is a Supervisor running in the background.
type run struct {
	s      *Supervisor
	cancel context.CancelFunc
	done   chan error
	err    error
}

// options returns Options for f with fast backoff and logs captured.
func (f *fake) options(logs *syncbuf.Buffer) Options {
	return Options{
		Binary:          fakeBinary,
		Args:            Args("/etc/keepalived/test.conf", nil, false),
		Env:             f.env(),
		Logger:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		PIDFile:         filepath.Join(f.dir, "no-such.pid"),
		StopTimeout:     20 * time.Second,
		BackoffMin:      time.Millisecond,
		BackoffMax:      5 * time.Millisecond,
		CrashLoopDeaths: 1000,
	}
}

func start(t *testing.T, opts Options) *run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{s: New(opts), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- r.s.Run(ctx) }()
	// Tests that expect Run's error check it themselves; the cleanup only
	// makes sure Run has returned.
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// stop cancels Run and waits for it; it returns Run's error.
func (r *run) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	if r.done != nil {
		select {
		case r.err = <-r.done:
		case <-time.After(60 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		r.done = nil
	}
	return r.err
}

// wait waits for Run to return on its own.
func (r *run) wait(t *testing.T) error {
	t.Helper()
	select {
	case r.err = <-r.done:
		r.done = nil
		return r.err
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func startFake(t *testing.T, f *fake, mutate func(*Options)) (*run, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	opts := f.options(logs)
	if mutate != nil {
		mutate(&opts)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs)
			t.Logf("fake events:\n%s", strings.Join(f.events(), "\n"))
		}
	})
	return start(t, opts), logs
}

func TestStartArgvAndStop(t *testing.T) {
	f := newFake(t)
	r, logs := startFake(t, f, func(o *Options) {
		o.Args = Args("/etc/keepalived/test.conf", []string{"-D", "--vrrp"}, false)
	})
	<-r.s.Started()
	wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
	pid := f.starts()[0]
	if got := r.s.PID(); got != pid {
		t.Errorf("PID() = %d, the fake runs as %d", got, pid)
	}
	if !r.s.Running() {
		t.Error("Running() = false while keepalived runs")
	}
	var argv []string
	line := f.events()[0]
	_, list, ok := strings.Cut(line, "[")
	if !ok {
		t.Fatalf("event %q has no argv", line)
	}
	if err := json.Unmarshal([]byte("["+list), &argv); err != nil {
		t.Fatalf("event %q: %v", line, err)
	}
	want := []string{fakeBinary, "-n", "--log-console", "--no-syslog", "-f", "/etc/keepalived/test.conf", "-D", "--vrrp"}
	if diff := cmp.Diff(want, argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}

	if r.s.Stopping() {
		t.Error("Stopping() = true while keepalived runs")
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run after stop = %v, want nil", err)
	}
	if !r.s.Stopping() {
		t.Error("Stopping() = false after the stop")
	}
	for _, ev := range []string{fmt.Sprintf("signal %d TERMINATED", pid), fmt.Sprintf("exit %d 0", pid)} {
		if !f.has(ev) {
			t.Errorf("no event %q", ev)
		}
	}
	if r.s.Running() || r.s.PID() != 0 {
		t.Errorf("after stop: Running() = %v, PID() = %d", r.s.Running(), r.s.PID())
	}
	if st, ok := r.s.LastExit(); !ok || st.PID != pid || st.Code != 0 || st.Signal != 0 {
		t.Errorf("LastExit() = %+v, %v; want pid %d exit 0", st, ok, pid)
	}
	if r.s.Deaths() != 0 || r.s.Restarts() != 0 {
		t.Errorf("Deaths() = %d, Restarts() = %d after a clean stop, want 0, 0", r.s.Deaths(), r.s.Restarts())
	}
	for _, msg := range []string{`msg="keepalived started"`, `msg="stopping keepalived"`, `msg="keepalived stopped"`} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("log lacks %s:\n%s", msg, logs)
		}
	}
}

// TestArgsSyslog: keepalived logs to syslog only where a syslog socket
// is; elsewhere the C library would copy every line to /dev/console.
func TestArgsSyslog(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "log")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{sock, []string{"-n", "--log-console", "-f", "k.conf", "-D"}},
		{file, []string{"-n", "--log-console", "--no-syslog", "-f", "k.conf", "-D"}},
		{filepath.Join(dir, "missing"), []string{"-n", "--log-console", "--no-syslog", "-f", "k.conf", "-D"}},
	} {
		got := Args("k.conf", []string{"-D"}, HasSyslog(tc.path))
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Args (-want +got):\n%s", filepath.Base(tc.path), diff)
		}
	}
}

func TestOutputPassedThrough(t *testing.T) {
	payload := make([]byte, 200_000)
	rand.Read(payload)
	payload = append(payload, "\nEntering MASTER STATE\r\n\x00no newline at the end"...)
	errPayload := []byte("stderr stays stderr\n\xff\xfe")

	t.Run("file", func(t *testing.T) {
		f := newFake(t)
		f.set("stdout", string(payload))
		f.set("stderr", string(errPayload))
		out, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		errOut, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
		if err != nil {
			t.Fatal(err)
		}
		defer errOut.Close()
		r, _ := startFake(t, f, func(o *Options) { o.Stdout, o.Stderr = out, errOut })
		wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string][]byte{out.Name(): payload, errOut.Name(): errPayload} {
			got, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: got %d bytes, want the %d written, byte for byte", filepath.Base(name), len(got), len(want))
			}
		}
	})
	t.Run("writer", func(t *testing.T) {
		f := newFake(t)
		f.set("stdout", string(payload))
		f.set("stderr", string(errPayload))
		out, errOut := &syncbuf.Buffer{}, &syncbuf.Buffer{}
		r, _ := startFake(t, f, func(o *Options) { o.Stdout, o.Stderr = out, errOut })
		wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if got := []byte(out.String()); !bytes.Equal(got, payload) {
			t.Errorf("stdout: got %d bytes, want the %d written, byte for byte", len(got), len(payload))
		}
		if got := []byte(errOut.String()); !bytes.Equal(got, errPayload) {
			t.Errorf("stderr: got %q, want %q", got, errPayload)
		}
	})
}

func TestRestartWithBackoff(t *testing.T) {
	f := newFake(t)
	f.set("exit-code", "3")
	var mu sync.Mutex
	var died []string
	r, logs := startFake(t, f, func(o *Options) {
		o.BackoffMin = 10 * time.Millisecond
		o.BackoffMax = 40 * time.Millisecond
		o.Died = func(status string, uptime, restartIn time.Duration) {
			mu.Lock()
			died = append(died, fmt.Sprintf("%s, restart in %s", status, restartIn))
			mu.Unlock()
		}
	})
	wait.For(t, "5 deaths", func() bool { return r.s.Deaths() >= 5 })
	f.unset("exit-code")
	wait.For(t, "a start that stays up", func() bool {
		pid := r.s.PID()
		return pid != 0 && f.has(fmt.Sprintf("running %d", pid))
	})
	deaths := r.s.Deaths()
	if got := r.s.Restarts(); got != deaths {
		t.Errorf("Restarts() = %d after %d deaths", got, deaths)
	}
	if st, ok := r.s.LastExit(); !ok || st.Code != 3 {
		t.Errorf("LastExit() = %+v, %v; want exit status 3", st, ok)
	}
	// Each restart delay doubles from BackoffMin up to BackoffMax.
	var delays []string
	for _, m := range regexp.MustCompile(`msg="restarting keepalived" delay=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
		delays = append(delays, m[1])
	}
	want := []string{"10ms", "20ms", "40ms", "40ms", "40ms"}
	if len(delays) < len(want) {
		t.Fatalf("restart delays %v, want at least %v", delays, want)
	}
	if diff := cmp.Diff(want, delays[:len(want)]); diff != "" {
		t.Errorf("restart delays (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), `msg="keepalived died"`) || !strings.Contains(logs.String(), `status="exit status 3"`) {
		t.Errorf("log lacks the death line with its exit status:\n%s", logs)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	wantDied := []string{"exit status 3, restart in 10ms", "exit status 3, restart in 20ms", "exit status 3, restart in 40ms"}
	if len(died) < len(wantDied) || !slices.Equal(died[:len(wantDied)], wantDied) {
		t.Errorf("Died got %q, want it to start with %q", died, wantDied)
	}
}

func TestBackoff(t *testing.T) {
	s := New(Options{BackoffMin: 100 * time.Millisecond, BackoffMax: 5 * time.Second})
	for _, tc := range []struct {
		deaths int
		want   time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{6, 3200 * time.Millisecond},
		{7, 5 * time.Second},
		{100, 5 * time.Second},
	} {
		if got := s.backoff(tc.deaths); got != tc.want {
			t.Errorf("backoff(%d) = %v, want %v", tc.deaths, got, tc.want)
		}
	}
}

func TestCrashLoopEndsRun(t *testing.T) {
	f := newFake(t)
	f.set("exit-code", "1")
	r, _ := startFake(t, f, func(o *Options) {
		o.CrashLoopDeaths = 3
		o.CrashLoopWindow = time.Hour
	})
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), "crash loop: 3 deaths within 1h0m0s, last exit status 1") {
		t.Fatalf("Run = %v, want a crash loop error", err)
	}
	if got := len(f.starts()); got != 3 {
		t.Errorf("%d starts, want 3", got)
	}
	if r.s.Deaths() != 3 || r.s.Restarts() != 2 {
		t.Errorf("Deaths() = %d, Restarts() = %d; want 3, 2", r.s.Deaths(), r.s.Restarts())
	}
}

func TestCannotStart(t *testing.T) {
	f := newFake(t)
	r, _ := startFake(t, f, func(o *Options) { o.Binary = filepath.Join(f.dir, "missing") })
	if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "starting keepalived") {
		t.Fatalf("Run = %v, want a start error", err)
	}
}

func TestReload(t *testing.T) {
	f := newFake(t)
	s := New(f.options(&syncbuf.Buffer{}))
	if err := s.Reload(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Reload before Run = %v, want ErrNotRunning", err)
	}
	r, _ := startFake(t, f, nil)
	wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
	pid := r.s.PID()
	// One at a time: pending SIGHUPs merge into one.
	for n := 1; n <= 2; n++ {
		if err := r.s.Reload(); err != nil {
			t.Fatal(err)
		}
		wait.For(t, fmt.Sprintf("SIGHUP number %d", n), func() bool {
			got := 0
			for _, e := range f.events() {
				if e == fmt.Sprintf("signal %d HANGUP", pid) {
					got++
				}
			}
			return got == n
		})
	}
	if r.s.PID() != pid || r.s.Restarts() != 0 || len(f.starts()) != 1 {
		t.Errorf("after Reload: PID %d (was %d), %d restarts, %d starts; want it untouched",
			r.s.PID(), pid, r.s.Restarts(), len(f.starts()))
	}
}

func TestGracefulStopWaitsForExit(t *testing.T) {
	f := newFake(t)
	f.set("hold-term", "")
	r, logs := startFake(t, f, nil)
	wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
	pid := r.s.PID()
	r.cancel()
	wait.For(t, "SIGTERM", func() bool { return f.has(fmt.Sprintf("signal %d TERMINATED", pid)) })
	// The fake cannot exit before term-release exists, so Run must still wait.
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v while keepalived was still exiting", err)
	default:
	}
	if r.s.PID() != pid {
		t.Errorf("PID() = %d while keepalived is exiting, want %d", r.s.PID(), pid)
	}
	f.set("term-release", "")
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !f.has(fmt.Sprintf("exit %d 0", pid)) {
		t.Error("Run returned before keepalived exited")
	}
	if strings.Contains(logs.String(), "SIGKILL") {
		t.Errorf("SIGKILL sent although keepalived exited:\n%s", logs)
	}
}

func TestStopTimeoutKills(t *testing.T) {
	f := newFake(t)
	f.set("ignore-term", "")
	r, logs := startFake(t, f, func(o *Options) { o.StopTimeout = 200 * time.Millisecond })
	wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
	pid := r.s.PID()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if st, _ := r.s.LastExit(); st.PID != pid || st.Signal != syscall.SIGKILL {
		t.Errorf("LastExit() = %+v, want pid %d killed by SIGKILL", st, pid)
	}
	if !strings.Contains(logs.String(), "sending SIGKILL") {
		t.Errorf("log does not say SIGKILL was sent:\n%s", logs)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("pid %d still exists after Run returned", pid)
	}
}

// TestAbandonedIsNotReported: a keepalived whose end never shows after
// SIGKILL (here nobody reaps it, so its exit never reaches the supervisor;
// on a node, a process stuck in the kernel) is given up on, no longer
// reported as running, and Run says so.
func TestAbandonedIsNotReported(t *testing.T) {
	f := newFake(t)
	f.set("ignore-term", "")
	r, logs := startFake(t, f, func(o *Options) {
		o.StopTimeout = 100 * time.Millisecond
		o.Reaper = NewReaper(nil) // never run: nothing is reaped
	})
	wait.For(t, "the start event", func() bool { return len(f.starts()) == 1 })
	pid := r.s.PID()
	t.Cleanup(func() {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
	})
	err := r.stop(t)
	if err == nil || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("Run = %v, want an error saying keepalived was abandoned\n%s", err, logs)
	}
	if r.s.Running() || r.s.PID() != 0 {
		t.Errorf("after abandoning pid %d: Running() = %v, PID() = %d; want false, 0", pid, r.s.Running(), r.s.PID())
	}
}

// noZombies waits until this process has no zombie children left.
func noZombies(t *testing.T) {
	t.Helper()
	var z []int
	wait.For(t, "no zombie children", func() bool {
		var err error
		z, err = (&Reaper{}).zombieChildren(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		return len(z) == 0
	})
}

func TestOrphansReaped(t *testing.T) {
	f := newFake(t)
	f.set("grandchild", "")
	f.set("exit-code", "1")
	r, _ := startFake(t, f, func(o *Options) { o.BackoffMin = 50 * time.Millisecond })
	wait.For(t, "a death", func() bool { return r.s.Deaths() >= 1 })
	f.unset("exit-code")
	f.unset("grandchild")
	// The fake logs "grandchild G" just before its own "start P"; only the
	// grandchildren of fakes that exited are orphans.
	var grandchildren []int
	events := f.events()
	for i, e := range events {
		gc, ok := strings.CutPrefix(e, "grandchild ")
		if !ok || i+1 == len(events) {
			continue
		}
		parent := strings.Fields(events[i+1])[1]
		if f.has("exit " + parent + " 1") {
			n, _ := strconv.Atoi(gc)
			grandchildren = append(grandchildren, n)
		}
	}
	if len(grandchildren) == 0 {
		t.Fatal("no fake that exited recorded a grandchild")
	}
	for _, pid := range grandchildren {
		wait.For(t, fmt.Sprintf("grandchild %d reaped", pid), func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			return errors.Is(err, os.ErrNotExist)
		})
	}
	noZombies(t)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestExecCommandNotStolen runs plain exec.Command(...).Run() calls while the
// reaper reaps a stream of orphans: none may lose its exit status.
func TestExecCommandNotStolen(t *testing.T) {
	reaper := NewReaper(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	reaperDone := make(chan struct{})
	go func() {
		defer close(reaperDone)
		_ = reaper.Run(ctx)
	}()
	defer func() {
		cancel()
		<-reaperDone
	}()

	f := newFake(t)
	f.set("grandchild", "")
	f.set("exit-code", "1")
	r, _ := startFake(t, f, func(o *Options) { o.Reaper = reaper })

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 4 {
		wg.Go(func() {
			for i := range 40 {
				err := exec.Command("sh", "-c", "exit 7").Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 7 {
					errs <- fmt.Errorf("goroutine %d run %d: exec.Command.Run = %v, want exit status 7", g, i, err)
				}
				out, err := exec.Command("sh", "-c", "echo $$").Output()
				if err != nil || len(out) == 0 {
					errs <- fmt.Errorf("goroutine %d run %d: Output = %q, %v", g, i, out, err)
				}
				err = reaper.RunCommand(exec.Command("sh", "-c", "exit 4"))
				if !errors.As(err, &ee) || ee.ExitCode() != 4 {
					errs <- fmt.Errorf("goroutine %d run %d: RunCommand = %v, want exit status 4", g, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if deaths := r.s.Deaths(); deaths < 2 {
		t.Logf("only %d keepalived deaths during the run", deaths)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if reaper.Reaped() == 0 {
		t.Error("the reaper reaped no orphan although the fake left grandchildren")
	}
	noZombies(t)
}

// TestReaperSeesPastForeignZombie: a child whose owner has not waited yet
// must not stop the reaper from reaping orphans.
func TestReaperSeesPastForeignZombie(t *testing.T) {
	reaper := NewReaper(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	reaperDone := make(chan struct{})
	go func() {
		defer close(reaperDone)
		_ = reaper.Run(ctx)
	}()
	defer func() {
		cancel()
		<-reaperDone
	}()

	mine := exec.Command("sh", "-c", "exit 9")
	if err := mine.Start(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "our own child to be a zombie", func() bool {
		st, err := proc.FS{}.Stat(mine.Process.Pid)
		return err == nil && st.State == 'Z'
	})
	for range 3 {
		out, err := exec.Command("sh", "-c", "sleep 0.05 & echo $!").Output()
		if err != nil {
			t.Fatal(err)
		}
		orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		wait.For(t, fmt.Sprintf("orphan %d reaped", orphan), func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/%d", orphan))
			return errors.Is(err, os.ErrNotExist)
		})
	}
	err := mine.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 9 {
		t.Errorf("Wait = %v, want exit status 9", err)
	}
	if reaper.Reaped() < 3 {
		t.Errorf("Reaped() = %d, want at least the 3 orphans", reaper.Reaped())
	}
}

func TestStopExisting(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "keepalived.pid")

	t.Run("missing file", func(t *testing.T) {
		stopped, err := StopExisting(proc.FS{}, filepath.Join(dir, "none.pid"), time.Second)
		if stopped || err != nil {
			t.Errorf("StopExisting = %v, %v; want false, nil", stopped, err)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		p := filepath.Join(dir, "garbage.pid")
		writeFile(t, p, "12x\n")
		if _, err := StopExisting(proc.FS{}, p, time.Second); err == nil || !strings.Contains(err.Error(), `"12x" is not a pid`) {
			t.Errorf("StopExisting = %v, want a not-a-pid error", err)
		}
	})
	t.Run("not keepalived", func(t *testing.T) {
		sleep := exec.Command("sleep", "60")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { sleep.Process.Kill(); sleep.Wait() }()
		p := filepath.Join(dir, "sleep.pid")
		writeFile(t, p, strconv.Itoa(sleep.Process.Pid)+"\n")
		stopped, err := StopExisting(proc.FS{}, p, time.Second)
		if stopped || err != nil {
			t.Errorf("StopExisting = %v, %v; want false, nil", stopped, err)
		}
		if err := sleep.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("sleep was signalled: %v", err)
		}
	})
	t.Run("stale", func(t *testing.T) {
		c := exec.Command("true")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "stale.pid")
		writeFile(t, p, strconv.Itoa(c.Process.Pid))
		stopped, err := StopExisting(proc.FS{}, p, time.Second)
		if stopped || err != nil {
			t.Errorf("StopExisting = %v, %v; want false, nil", stopped, err)
		}
	})

	runFake := func(t *testing.T, f *fake) *exec.Cmd {
		t.Helper()
		os.Remove(pidFile)
		c := exec.Command(fakeBinary, "-n", "-p", pidFile)
		c.Env = f.env()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		wait.For(t, "the fake's start", func() bool { return len(f.starts()) == 1 })
		return c
	}
	t.Run("keepalived", func(t *testing.T) {
		f := newFake(t)
		c := runFake(t, f)
		stopped, err := StopExisting(proc.FS{}, pidFile, 20*time.Second)
		if !stopped || err != nil {
			t.Fatalf("StopExisting = %v, %v; want true, nil", stopped, err)
		}
		if !f.has(fmt.Sprintf("signal %d TERMINATED", c.Process.Pid)) || !f.has(fmt.Sprintf("exit %d 0", c.Process.Pid)) {
			t.Errorf("events %q lack SIGTERM and exit", f.events())
		}
	})
	t.Run("ignores SIGTERM", func(t *testing.T) {
		f := newFake(t)
		f.set("ignore-term", "")
		c := runFake(t, f)
		stopped, err := StopExisting(proc.FS{}, pidFile, 200*time.Millisecond)
		if !stopped || err == nil || !strings.Contains(err.Error(), "was killed") {
			t.Fatalf("StopExisting = %v, %v; want true and a killed error", stopped, err)
		}
		err = c.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("fake ended with %v, want SIGKILL", err)
		}
	})
}

// TestRunStopsLeftover: Run stops a keepalived named by PIDFile before it
// starts its own.
func TestRunStopsLeftover(t *testing.T) {
	left := newFake(t)
	pidFile := filepath.Join(left.dir, "keepalived.pid")
	c := exec.Command(fakeBinary, "-n", "-p", pidFile)
	c.Env = left.env()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	wait.For(t, "the leftover's start", func() bool { return len(left.starts()) == 1 })

	f := newFake(t)
	r, logs := startFake(t, f, func(o *Options) { o.PIDFile = pidFile })
	wait.For(t, "our start", func() bool { return len(f.starts()) == 1 })
	if !left.has(fmt.Sprintf("exit %d 0", c.Process.Pid)) {
		t.Errorf("the leftover keepalived was not stopped; events %q", left.events())
	}
	if !strings.Contains(logs.String(), "stopped keepalived left running") {
		t.Errorf("log does not mention the leftover:\n%s", logs)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestRunNeedsABinary(t *testing.T) {
	s := New(Options{Logger: slog.New(slog.DiscardHandler)})
	if err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "Options.Binary is required") {
		t.Errorf("Run without a binary: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
