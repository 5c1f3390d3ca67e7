package proc

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestStatSelf(t *testing.T) {
	state, ppid, err := Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if state != 'R' && state != 'S' {
		t.Errorf("own state %q, want R or S", state)
	}
	if ppid != os.Getppid() {
		t.Errorf("parent %d, want %d", ppid, os.Getppid())
	}
}

// TestPIDs: the list holds this process and its parent, and nothing twice.
func TestPIDs(t *testing.T) {
	pids, err := PIDs()
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

// TestStatStoppedAndZombie follows a child through stopped (T), running and
// zombie (Z), with a command name holding a space and a parenthesis.
func TestStatStoppedAndZombie(t *testing.T) {
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
		var got byte
		for range 200 {
			var err error
			var ppid int
			if got, ppid, err = Stat(pid); err != nil {
				t.Fatal(err)
			}
			if ppid != os.Getpid() {
				t.Fatalf("parent of %d: %d, want %d", pid, ppid, os.Getpid())
			}
			if got == state {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("state of %d: %q, want %q", pid, got, state)
	}
	syscall.Kill(pid, syscall.SIGSTOP)
	want('T')
	syscall.Kill(pid, syscall.SIGCONT)
	want('S')
	syscall.Kill(pid, syscall.SIGKILL)
	want('Z')
	cmd.Wait()
	if _, _, err := Stat(pid); !os.IsNotExist(err) {
		t.Errorf("Stat of a reaped pid: %v, want not-exist", err)
	}
}

func TestHandlesSignal(t *testing.T) {
	// A fresh sleep neither blocks nor catches SIGUSR2 or SIGHUP.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2} {
		if ok, err := HandlesSignal(cmd.Process.Pid, sig); err != nil || ok {
			t.Errorf("sleep handles %v: %v, %v; want false", sig, ok, err)
		}
	}

	// The Go runtime catches SIGUSR2 (SigCgt) in every Go program.
	if ok, err := HandlesSignal(os.Getpid(), syscall.SIGUSR2); err != nil || !ok {
		t.Errorf("own SIGUSR2: %v, %v; want true", ok, err)
	}
	if _, err := HandlesSignal(os.Getpid(), 0); err == nil {
		t.Error("signal 0 accepted")
	}
	if _, err := HandlesSignal(1<<22, syscall.SIGHUP); err == nil {
		t.Error("no error for a pid that does not exist")
	}
}
