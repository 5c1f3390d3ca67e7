package lab

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSoftirqThreadsRealTime: every CPU's ksoftirqd is found, made
// real-time, and given back the scheduling it had.
func onlineCPUs() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(1, &set); err != nil {
		return 0, err
	}
	return set.Count(), nil
}

func TestSoftirqThreadsRealTime(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	s, err := FindSoftirqThreads()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := onlineCPUs(); err != nil || len(s.Pids) != n {
		t.Errorf("found %d ksoftirqd threads %v, the machine has %d CPUs online (%v)", len(s.Pids), s.Pids, n, err)
	}
	type sched struct{ policy, priority uint32 }
	before := map[int]sched{}
	for _, pid := range s.Pids {
		p, r, err := policy(pid)
		if err != nil {
			t.Fatal(err)
		}
		before[pid] = sched{p, r}
	}
	if err := s.RealTime(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range s.Pids {
		if p, r, err := policy(pid); err != nil || p != unix.SCHED_FIFO || r != 1 {
			t.Errorf("ksoftirqd (pid %d) after RealTime: policy %d priority %d (%v), want SCHED_FIFO 1", pid, p, r, err)
		}
	}
	if err := s.RealTime(); err == nil {
		t.Error("RealTime twice did not fail: the second would remember real-time as the threads' own")
	}
	if err := s.Restore(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range s.Pids {
		if p, r, err := policy(pid); err != nil || (sched{p, r}) != before[pid] {
			t.Errorf("ksoftirqd (pid %d) after Restore: policy %d priority %d (%v), want %v", pid, p, r, err, before[pid])
		}
	}
	if err := s.Restore(); err != nil {
		t.Errorf("Restore twice: %v", err)
	}
}

// policy returns the thread's scheduling policy and real-time priority.
func policy(pid int) (policy, priority uint32, err error) {
	a, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		return 0, 0, err
	}
	return a.Policy, a.Priority, nil
}

// TestSoftirqThreadsLeftReal: threads a killed run left real-time are
// given the kernel's fair class back, not real-time again.
func TestSoftirqThreadsLeftReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	s, err := FindSoftirqThreads()
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Pids[0]
	before, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	before.Size = unix.SizeofSchedAttr
	t.Cleanup(func() {
		if err := unix.SchedSetAttr(pid, before, 0); err != nil {
			t.Errorf("giving ksoftirqd (pid %d) its scheduling back: %v", pid, err)
		}
	})
	// A killed run's leftover.
	if err := unix.SchedSetAttr(pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.RealTime(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(); err != nil {
		t.Fatal(err)
	}
	if p, r, err := policy(pid); err != nil || p != unix.SCHED_NORMAL || r != 0 {
		t.Errorf("ksoftirqd (pid %d) left real-time, after RealTime and Restore: policy %d priority %d (%v), want SCHED_NORMAL", pid, p, r, err)
	}
}
