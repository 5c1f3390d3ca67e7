package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixture is a proc tree captured in the shape the kernel writes it:
// ipfailover (1), keepalived (42, NSpid 30142 42, signals blocked, its
// binary replaced), a zombie whose name holds ") " (77), a stopped sleep
// (88), a malformed entry (99), and a "self" holding a pidfd for 42.
var fixture = FS{Root: "testdata/proc"}

func TestFixturePIDs(t *testing.T) {
	got, err := fixture.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 42, 77, 88, 99}, got); diff != "" {
		t.Errorf("PIDs (-want +got):\n%s", diff)
	}
}

func TestFixtureStat(t *testing.T) {
	for _, tt := range []struct {
		pid  int
		want Stat
	}{
		{1, Stat{Comm: "ipfailover", State: 'S', PPID: 0}},
		{42, Stat{Comm: "keepalived", State: 'S', PPID: 1}},
		{77, Stat{Comm: "sl) eep", State: 'Z', PPID: 42}},
		{88, Stat{Comm: "sleep", State: 'T', PPID: 1}},
	} {
		got, err := fixture.Stat(tt.pid)
		if err != nil {
			t.Errorf("Stat(%d): %v", tt.pid, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Stat(%d) (-want +got):\n%s", tt.pid, diff)
		}
	}
	if _, err := fixture.Stat(99); err == nil {
		t.Error("Stat of a malformed entry: no error")
	}
	if _, err := fixture.Stat(1234); !os.IsNotExist(err) {
		t.Errorf("Stat of a missing pid: %v, want not-exist", err)
	}
}

func TestFixtureStatus(t *testing.T) {
	st, err := fixture.Status(42)
	if err != nil {
		t.Fatal(err)
	}
	want := Status{NSpid: []int{30142, 42}, SigBlk: 0x800014a03, SigCgt: 0}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Status(42) (-want +got):\n%s", diff)
	}
	if _, err := fixture.Status(99); err == nil {
		t.Error("Status with a malformed NSpid: no error")
	}
}

func TestFixtureHandlesSignal(t *testing.T) {
	for _, tt := range []struct {
		pid  int
		sig  syscall.Signal
		want bool
	}{
		{42, syscall.SIGHUP, true},  // blocked, read from a signalfd
		{42, 36, true},              // SIGRTMIN+2, the JSON dump
		{42, syscall.SIGUSR2, true}, // blocked
		{42, 37, false},             // neither
		{1, syscall.SIGHUP, true},   // caught
		{1, syscall.SIGPIPE, true},  // caught
		{1, syscall.SIGKILL, false}, // cannot be
		{88, syscall.SIGHUP, false}, // a plain sleep
	} {
		got, err := fixture.HandlesSignal(tt.pid, tt.sig)
		if err != nil || got != tt.want {
			t.Errorf("HandlesSignal(%d, %d) = %v, %v; want %v", tt.pid, tt.sig, got, err, tt.want)
		}
	}
	for _, sig := range []syscall.Signal{0, 65} {
		if _, err := fixture.HandlesSignal(42, sig); err == nil {
			t.Errorf("signal %d accepted", sig)
		}
	}
	if _, err := fixture.HandlesSignal(1234, syscall.SIGHUP); err == nil {
		t.Error("no error for a pid that does not exist")
	}
}

func TestFixtureExe(t *testing.T) {
	if got, err := fixture.Exe(42); err != nil || got != "/usr/sbin/keepalived" {
		t.Errorf("Exe(42) = %q, %v; want /usr/sbin/keepalived without (deleted)", got, err)
	}
	if _, err := fixture.Exe(77); err == nil {
		t.Error("Exe of a zombie (no exe link): no error")
	}
}

func TestFixtureHoldsPidfd(t *testing.T) {
	for pid, want := range map[int]bool{42: true, 88: false, 1: false} {
		if got := fixture.HoldsPidfd(pid); got != want {
			t.Errorf("HoldsPidfd(%d) = %v, want %v", pid, got, want)
		}
	}
	if (FS{Root: t.TempDir()}).HoldsPidfd(42) {
		t.Error("a tree without self/fd holds a pidfd")
	}
}

func TestZeroFSReadsTheHost(t *testing.T) {
	if got := (FS{}).dir(); got != DefaultRoot {
		t.Errorf("zero FS reads %q, want %q", got, DefaultRoot)
	}
}

// The tests below read this machine's /proc: what the kernel writes must
// still parse as the fixture says.

func TestHostStatSelf(t *testing.T) {
	st, err := FS{}.Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.State != 'R' && st.State != 'S' {
		t.Errorf("own state %q, want R or S", st.State)
	}
	if st.PPID != os.Getppid() {
		t.Errorf("parent %d, want %d", st.PPID, os.Getppid())
	}
}

// TestHostPIDs: the list holds this process and its parent, and nothing twice.
func TestHostPIDs(t *testing.T) {
	pids, err := FS{}.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, pid := range pids {
		if seen[pid] {
			t.Fatalf("pid %d listed twice", pid)
		}
		seen[pid] = true
	}
	if !seen[os.Getpid()] || !seen[os.Getppid()] {
		t.Errorf("PIDs() = %v lacks this process %d or its parent %d", pids, os.Getpid(), os.Getppid())
	}
}

// TestHostStatStoppedAndZombie follows a child through stopped (T),
// running and zombie (Z), with a command name holding a space and a
// parenthesis.
func TestHostStatStoppedAndZombie(t *testing.T) {
	dir := t.TempDir()
	bin := dir + "/sl) eep"
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer cmd.Process.Kill()

	want := func(state byte) {
		t.Helper()
		var got Stat
		for range 200 {
			var err error
			if got, err = (FS{}).Stat(pid); err != nil {
				t.Fatal(err)
			}
			if got.PPID != os.Getpid() || got.Comm != "sl) eep" {
				t.Fatalf("stat of %d: %+v, want parent %d and comm %q", pid, got, os.Getpid(), "sl) eep")
			}
			if got.State == state {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("state of %d: %q, want %q", pid, got.State, state)
	}
	syscall.Kill(pid, syscall.SIGSTOP)
	want('T')
	syscall.Kill(pid, syscall.SIGCONT)
	want('S')
	syscall.Kill(pid, syscall.SIGKILL)
	want('Z')
	cmd.Wait()
	if _, err := (FS{}).Stat(pid); !os.IsNotExist(err) {
		t.Errorf("Stat of a reaped pid: %v, want not-exist", err)
	}
}

func TestHostHandlesSignal(t *testing.T) {
	// A fresh sleep neither blocks nor catches SIGUSR2 or SIGHUP.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2} {
		if ok, err := (FS{}).HandlesSignal(cmd.Process.Pid, sig); err != nil || ok {
			t.Errorf("sleep handles %v: %v, %v; want false", sig, ok, err)
		}
	}
	// The Go runtime catches SIGUSR2 (SigCgt) in every Go program.
	if ok, err := (FS{}).HandlesSignal(os.Getpid(), syscall.SIGUSR2); err != nil || !ok {
		t.Errorf("own SIGUSR2: %v, %v; want true", ok, err)
	}
	// exec.Cmd holds a pidfd of every child it started until Wait.
	if !(FS{}).HoldsPidfd(cmd.Process.Pid) {
		t.Errorf("no pidfd held for the child %d", cmd.Process.Pid)
	}
	if st, err := (FS{}).Status(os.Getpid()); err != nil || len(st.NSpid) == 0 || st.NSpid[len(st.NSpid)-1] != os.Getpid() {
		t.Errorf("own NSpid: %+v, %v; want it to end with %d", st, err, os.Getpid())
	}
}
