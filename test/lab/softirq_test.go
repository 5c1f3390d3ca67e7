package lab

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func onlineCPUs() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(1, &set); err != nil {
		return 0, err
	}
	return set.Count(), nil
}

// policy returns the thread's scheduling policy and real-time priority.
func policy(pid int) (policy, priority uint32, err error) {
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		return 0, 0, err
	}
	return a.Policy, a.Priority, nil
}

// softirqThreads finds the machine's ksoftirqd threads, or skips where
// the lab cannot raise them.
func softirqThreads(t *testing.T) *SoftirqThreads {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	s, err := FindSoftirqThreads()
	if errors.Is(err, ErrSoftirqUnavailable) {
		t.Skipf("%v; a lab run goes on without them", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// realTime is s.RealTime for a test's first use of the threads: it skips
// where the kernel refuses the change.
func realTime(ctx context.Context, t *testing.T, s *SoftirqThreads) {
	t.Helper()
	err := s.RealTime(ctx)
	if errors.Is(err, ErrSoftirqUnavailable) {
		t.Skipf("%v; a lab run goes on without them", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestFindSoftirqThreads: the kernel's ksoftirqd threads are found in a
// /proc, a process naming itself so is not one, and a /proc that shows
// no kernel thread at all (a PID namespace of its own) is told apart from
// one that shows the kernel's threads but no ksoftirqd.
func TestFindSoftirqThreads(t *testing.T) {
	type proc struct{ comm, cmdline string }
	kthreadd := proc{"kthreadd", ""}
	for _, tc := range []struct {
		name        string
		procs       map[int]proc
		want        []int
		unavailable bool // the error wraps ErrSoftirqUnavailable
	}{
		{
			name: "the machine's PID namespace",
			procs: map[int]proc{1: {"systemd", "init\x00"}, 2: kthreadd, 15: {"ksoftirqd/0", ""}, 23: {"ksoftirqd/1", ""},
				900: {"ksoftirqd/7", "./impostor\x00"}},
			want: []int{15, 23},
		},
		{
			name:        "a PID namespace of its own",
			procs:       map[int]proc{1: {"catatonit", "catatonit\x00"}, 2: {"bash", "bash\x00"}, 40: {"go", "go\x00test\x00"}},
			unavailable: true,
		},
		{
			name:        "a process naming itself kthreadd",
			procs:       map[int]proc{1: {"bash", "bash\x00"}, 2: {"kthreadd", "kthreadd\x00"}},
			unavailable: true,
		},
		{
			name:  "the kernel's threads but no ksoftirqd",
			procs: map[int]proc{1: {"systemd", "init\x00"}, 2: kthreadd, 3: {"pool_workqueue_release", ""}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for pid, p := range tc.procs {
				dir := filepath.Join(root, strconv.Itoa(pid))
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := errors.Join(os.WriteFile(filepath.Join(dir, "comm"), []byte(p.comm+"\n"), 0o644),
					os.WriteFile(filepath.Join(dir, "cmdline"), []byte(p.cmdline), 0o644)); err != nil {
					t.Fatal(err)
				}
			}
			s, err := findSoftirqThreads(root)
			if tc.want != nil {
				if err != nil {
					t.Fatal(err)
				}
				got := slices.Sorted(slices.Values(s.Pids))
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("pids (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("found %v, want an error", s.Pids)
			}
			if got := errors.Is(err, ErrSoftirqUnavailable); got != tc.unavailable {
				t.Errorf("%v: wraps ErrSoftirqUnavailable %t, want %t", err, got, tc.unavailable)
			}
		})
	}
}

// TestSoftirqThreadsRealTime: every CPU's ksoftirqd is found, made
// real-time, and given back the scheduling it had. (A chaos run of another
// package's tests may hold them meanwhile: RealTime waits for it.)
func TestSoftirqThreadsRealTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := softirqThreads(t)
	if n, err := onlineCPUs(); err != nil || len(s.Pids) != n {
		t.Errorf("found %d ksoftirqd threads %v, the machine has %d CPUs online (%v)", len(s.Pids), s.Pids, n, err)
	}
	realTime(ctx, t, s)
	former := append([]unix.SchedAttr(nil), s.former...)
	for i, pid := range s.Pids {
		if former[i].Policy == unix.SCHED_FIFO && former[i].Priority == 1 {
			t.Errorf("ksoftirqd (pid %d): RealTime remembers real-time as its own", pid)
		}
		if p, r, err := policy(pid); err != nil || p != unix.SCHED_FIFO || r != 1 {
			t.Errorf("ksoftirqd (pid %d) after RealTime: policy %d priority %d (%v), want SCHED_FIFO 1", pid, p, r, err)
		}
	}
	if err := s.RealTime(ctx); err == nil {
		t.Error("RealTime twice did not fail: the second would remember real-time as the threads' own")
	}
	if err := s.Restore(); err != nil {
		t.Fatal(err)
	}
	for i, pid := range s.Pids {
		if p, r, err := policy(pid); err != nil || p != former[i].Policy || r != former[i].Priority {
			t.Errorf("ksoftirqd (pid %d) after Restore: policy %d priority %d (%v), want %d %d", pid, p, r, err, former[i].Policy, former[i].Priority)
		}
	}
	if err := s.Restore(); err != nil {
		t.Errorf("Restore twice: %v", err)
	}
}

// TestSoftirqThreadsWait: a second user waits until the first gives the
// threads back, and gives up when its context ends.
func TestSoftirqThreadsWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first, second := softirqThreads(t), softirqThreads(t)
	realTime(ctx, t, first)
	t.Cleanup(func() { _ = first.Restore() })
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := second.RealTime(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second RealTime while the first holds them: %v, want it to wait until its context ends", err)
	}
	if err := first.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := second.RealTime(ctx); err != nil {
		t.Fatalf("RealTime after the first gave them back: %v", err)
	}
	if err := second.Restore(); err != nil {
		t.Fatal(err)
	}
}

// TestSoftirqThreadsLeftReal: threads a killed run left real-time are
// given the kernel's fair class back, not real-time again.
func TestSoftirqThreadsLeftReal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	killed, s := softirqThreads(t), softirqThreads(t)
	realTime(ctx, t, killed)
	// Killed: the kernel releases its lock, nobody restores.
	if err := killed.lock.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.RealTime(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range s.Pids {
		if p, r, err := policy(pid); err != nil || p != unix.SCHED_NORMAL || r != 0 {
			t.Errorf("ksoftirqd (pid %d) left real-time, after RealTime and Restore: policy %d priority %d (%v), want SCHED_NORMAL", pid, p, r, err)
		}
	}
}

// TestSoftirqThreadsNotPermitted: where the kernel refuses the change,
// RealTime says the threads are unavailable and leaves them as they were.
// Capabilities are a thread's own: this test's thread alone drops
// CAP_SYS_NICE, and stays locked to the test so that it ends with it.
func TestSoftirqThreadsNotPermitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := softirqThreads(t)
	var before []unix.SchedAttr
	for _, pid := range s.Pids {
		a, err := unix.SchedGetAttr(pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Policy == unix.SCHED_FIFO && a.Priority == 1 {
			t.Skipf("ksoftirqd (pid %d) is real-time already (a lab run holds it, or a killed one left it): the kernel lets its owner set it so again without CAP_SYS_NICE", pid)
		}
		before = append(before, *a)
	}
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		t.Fatal(err)
	}
	caps[unix.CAP_SYS_NICE/32].Effective &^= 1 << (unix.CAP_SYS_NICE % 32)
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		t.Fatal(err)
	}
	err := s.RealTime(ctx)
	if !errors.Is(err, ErrSoftirqUnavailable) || !errors.Is(err, unix.EPERM) {
		t.Errorf("RealTime without CAP_SYS_NICE: %v, want ErrSoftirqUnavailable and EPERM", err)
	}
	if err == nil {
		if err := s.Restore(); err != nil {
			t.Error(err)
		}
	}
	for i, pid := range s.Pids {
		if p, r, err := policy(pid); err != nil || p != before[i].Policy || r != before[i].Priority {
			t.Errorf("ksoftirqd (pid %d) after a refused RealTime: policy %d priority %d (%v), want %d %d", pid, p, r, err, before[i].Policy, before[i].Priority)
		}
	}
}
