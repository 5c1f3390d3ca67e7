package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/nstest"
	"github.com/ipfailover/ipfailover/test/syncbuf"
	"github.com/ipfailover/ipfailover/test/wait"
)

// netns makes a network namespace with a veth pair (veth0 192.0.2.1/24 and
// veth1, both up) and removes it when the test ends.
func netns(t *testing.T) string {
	t.Helper()
	ns := nstest.New(t, "ipfsup")
	nstest.IP(t, ns, "link", "set", "lo", "up")
	nstest.Veth(t, ns, "veth0", "veth1")
	nstest.IP(t, ns, "addr", "add", "192.0.2.1/24", "dev", "veth0")
	return ns
}

const realConfig = `global_defs {
    router_id supervisor_test
    max_auto_priority
}

vrrp_instance VI_1 {
    state BACKUP
    interface veth0
    virtual_router_id 51
    priority 100
    advert_int 1
    virtual_ipaddress {
        192.0.2.100/32 dev veth0
    }
}
`

// readPID returns the pid in file, 0 when it cannot be read.
func readPID(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// realRig is a Supervisor running the real keepalived in a fresh network
// namespace, with its files in a temporary directory.
type realRig struct {
	s                    *Supervisor
	ns                   string
	pidFile, vrrpPIDFile string
	output, logs         *syncbuf.Buffer
	cancel               context.CancelFunc
	done                 chan error
}

// startReal starts a Supervisor on the real keepalived (skipping the test
// where that cannot run); the supervisor is stopped when the test ends.
func startReal(t *testing.T) *realRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the real keepalived in a new network namespace")
	}
	if _, err := os.Stat(keepalived.DefaultBinary); err != nil {
		t.Skipf("keepalived is not installed: %v", err)
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Skipf("iproute2 is not installed: %v", err)
	}
	r := &realRig{ns: netns(t), output: &syncbuf.Buffer{}, logs: &syncbuf.Buffer{}, done: make(chan error, 1)}
	dir := t.TempDir()
	conf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(conf, []byte(realConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	r.pidFile = filepath.Join(dir, "keepalived.pid")
	r.vrrpPIDFile = filepath.Join(dir, "vrrp.pid")
	// `ip netns exec` execs keepalived in place, so its pid is the one the
	// supervisor started.
	args := append([]string{"netns", "exec", r.ns, keepalived.DefaultBinary},
		Args(conf, []string{"-D", "-P", "-r", r.vrrpPIDFile, "-c", filepath.Join(dir, "checkers.pid"), "-b", filepath.Join(dir, "bfd.pid")}, false)...)
	args = append(args, "-p", r.pidFile)

	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	r.s = New(Options{
		Binary:      ipPath,
		Args:        args,
		Stdout:      r.output,
		Stderr:      r.output,
		Logger:      slog.New(slog.NewTextHandler(r.logs, nil)),
		PIDFile:     r.pidFile,
		StopTimeout: 20 * time.Second,
		BackoffMin:  200 * time.Millisecond,
	})
	go func() { r.done <- r.s.Run(ctx) }()
	t.Cleanup(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s\nkeepalived output:\n%s", r.logs, r.output)
		} else if testing.Verbose() {
			t.Logf("supervisor log:\n%s", r.logs)
		}
	})
	return r
}

// TestRealKeepalived supervises the real keepalived in a fresh network
// namespace: start, SIGKILL, restart, graceful stop.
func TestRealKeepalived(t *testing.T) {
	r := startReal(t)
	wait.For(t, "keepalived to enter MASTER state", func() bool {
		return strings.Contains(r.output.String(), "Entering MASTER STATE")
	})
	first := r.s.PID()
	wait.For(t, "the pid file to name PID()", func() bool { return readPID(r.pidFile) == first && first != 0 })
	wait.For(t, "the VRRP child's pid file", func() bool { return readPID(r.vrrpPIDFile) != 0 })
	vrrpChild := readPID(r.vrrpPIDFile)

	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the restarted keepalived to enter MASTER state", func() bool {
		return strings.Count(r.output.String(), "Entering MASTER STATE") >= 2
	})
	second := r.s.PID()
	if second == 0 || second == first || readPID(r.pidFile) != second {
		t.Fatalf("after the restart PID() = %d, pid file %d, first pid %d", second, readPID(r.pidFile), first)
	}
	// The old VRRP child was stopped before the restart, so the new
	// keepalived started at the first attempt.
	if r.s.Deaths() != 1 || r.s.Restarts() != 1 {
		t.Errorf("Deaths() = %d, Restarts() = %d; want 1, 1", r.s.Deaths(), r.s.Restarts())
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", vrrpChild)); !os.IsNotExist(err) {
		t.Errorf("the old VRRP child %d is still there", vrrpChild)
	}
	st, _ := r.s.LastExit()
	if st.PID != first || st.Signal != syscall.SIGKILL {
		t.Errorf("LastExit() = %+v, want pid %d killed by SIGKILL", st, first)
	}
	noZombies(t)

	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	r.done <- nil // for the cleanup
	if st, _ := r.s.LastExit(); st.PID != second || st.Code != 0 || st.Signal != 0 {
		t.Errorf("LastExit() = %+v, want pid %d exit status 0 (no SIGKILL)", st, second)
	}
	if strings.Contains(r.logs.String(), "SIGKILL") {
		t.Errorf("keepalived needed SIGKILL to stop:\n%s", r.logs)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", second)); !os.IsNotExist(err) {
		t.Errorf("keepalived pid %d still exists after Run returned", second)
	}
	out, err := exec.Command("ip", "-n", r.ns, "-o", "addr", "show", "dev", "veth0").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr: %v: %s", err, out)
	}
	if strings.Contains(string(out), "192.0.2.100") {
		t.Errorf("keepalived left its VIP behind after a graceful stop:\n%s", out)
	}
	noZombies(t)
}

// TestRealKeepalivedReloadAtStart asks for a reload the moment keepalived
// has been started, before it can have set up its signals: SIGHUP's default
// action would end it. It must instead get the SIGHUP once it handles it, and
// reload without dying.
func TestRealKeepalivedReloadAtStart(t *testing.T) {
	r := startReal(t)
	<-r.s.Started()
	pid := r.s.PID()
	if err := r.s.Reload(); err != nil {
		t.Fatalf("Reload right after the start: %v", err)
	}
	wait.For(t, "keepalived to reload", func() bool {
		return strings.Contains(r.output.String(), "Reloading")
	})
	wait.For(t, "keepalived to enter MASTER state", func() bool {
		return strings.Contains(r.output.String(), "Entering MASTER STATE")
	})
	if r.s.Deaths() != 0 || r.s.PID() != pid {
		t.Errorf("after the reload: %d deaths, pid %d (was %d); want keepalived untouched", r.s.Deaths(), r.s.PID(), pid)
	}
}
