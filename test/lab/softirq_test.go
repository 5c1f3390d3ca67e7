package lab

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

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

func findSoftirqThreads(t *testing.T) *SoftirqThreads {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	s, err := FindSoftirqThreads()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSoftirqThreadsRealTime: every CPU's ksoftirqd is found, made
// real-time, and given back the scheduling it had. (A chaos run of another
// package's tests may hold them meanwhile: RealTime waits for it.)
func TestSoftirqThreadsRealTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := findSoftirqThreads(t)
	if n, err := onlineCPUs(); err != nil || len(s.Pids) != n {
		t.Errorf("found %d ksoftirqd threads %v, the machine has %d CPUs online (%v)", len(s.Pids), s.Pids, n, err)
	}
	if err := s.RealTime(ctx); err != nil {
		t.Fatal(err)
	}
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
	first, second := findSoftirqThreads(t), findSoftirqThreads(t)
	if err := first.RealTime(ctx); err != nil {
		t.Fatal(err)
	}
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
	killed, s := findSoftirqThreads(t), findSoftirqThreads(t)
	if err := killed.RealTime(ctx); err != nil {
		t.Fatal(err)
	}
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
