package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// SoftirqThreads are the kernel's ksoftirqd/N threads, one per CPU: when a
// CPU's softirq work (every packet received on it: the veths, the netem
// queues, the bridge) runs too long to finish where it was raised, it is
// left to that CPU's thread, and waits until the scheduler runs it.
type SoftirqThreads struct {
	// Pids are the threads' ids.
	Pids   []int
	former []unix.SchedAttr
	lock   *os.File
}

// softirqLock is held by whoever has the threads real-time: a second user
// (a test beside a chaos run, a second run) waits until the first gives
// them back, so that neither takes the other's real-time for the
// threads' own. The kernel releases it when its holder dies.
const softirqLock = "/run/ipfailover-lab-softirq.lock"

// ErrSoftirqUnavailable is wrapped, with the reason, by what
// FindSoftirqThreads and RealTime return where the lab cannot raise the
// kernel's softirq threads: /proc shows none of the kernel's threads (a
// PID namespace of its own, as a container's), or the kernel refuses the
// change and RealTime has left every thread as it was. A lab can run
// without them, its softirq work then waiting at the fair class. Every
// other failure (threads to be found and none found, a change that fails
// otherwise, a restore that fails) is the lab's own.
var ErrSoftirqUnavailable = errors.New("the kernel's softirq threads cannot be made real-time here")

// FindSoftirqThreads lists the machine's ksoftirqd threads.
func FindSoftirqThreads() (*SoftirqThreads, error) {
	return findSoftirqThreads("/proc")
}

// findSoftirqThreads lists the ksoftirqd threads of the /proc at proc.
func findSoftirqThreads(proc string) (*SoftirqThreads, error) {
	comms, err := filepath.Glob(filepath.Join(proc, "[0-9]*", "comm"))
	if err != nil {
		return nil, err
	}
	s := &SoftirqThreads{}
	for _, f := range comms {
		if !kernelThread(filepath.Dir(f), "ksoftirqd/") {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		s.Pids = append(s.Pids, pid)
	}
	if len(s.Pids) > 0 {
		return s, nil
	}
	// The kernel's threads are children of kthreadd, pid 2 of the
	// first PID namespace; a PID namespace of its own shows none of them.
	if !kernelThread(filepath.Join(proc, "2"), "kthreadd") {
		return nil, fmt.Errorf("%w: %s shows none of the kernel's threads (no kthreadd as pid 2): this process runs in a PID namespace of its own", ErrSoftirqUnavailable, proc)
	}
	return nil, fmt.Errorf("no ksoftirqd thread found in %s, beside the kernel's kthreadd", proc)
}

// kernelThread reports whether the process at dir (a /proc/PID) is a
// kernel thread whose name begins with prefix. A kernel thread has no
// command line; a process naming itself so does.
func kernelThread(dir, prefix string) bool {
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil || !strings.HasPrefix(string(comm), prefix) {
		return false // gone since the glob, or another
	}
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	return err == nil && len(cmd) == 0
}

// RealTime waits until no other user has the threads real-time (or ctx
// ends), gives every thread the lowest real-time priority (SCHED_FIFO 1)
// and remembers what each had, for Restore (the fair class for a
// thread a killed run left real-time). A thread of the fair class
// competes with every cgroup by its share; at the real-time class it runs
// as soon as it is woken, as the same work does when it runs where it was
// raised.
func (s *SoftirqThreads) RealTime(ctx context.Context) error {
	if s.lock != nil {
		return errors.New("the softirq threads are real-time already")
	}
	lock, err := os.OpenFile(softirqLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			lock.Close()
			return fmt.Errorf("locking %s: %w", softirqLock, err)
		}
		select {
		case <-ctx.Done():
			lock.Close()
			return fmt.Errorf("waiting for another run to give the softirq threads back (%s): %w", softirqLock, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	var former []unix.SchedAttr
	for _, pid := range s.Pids {
		a, err := unix.SchedGetAttr(pid, 0)
		if err != nil {
			return errors.Join(fmt.Errorf("reading ksoftirqd (pid %d)'s scheduling: %w", pid, err), s.restore(former), lock.Close())
		}
		if a.Policy == unix.SCHED_FIFO && a.Priority == 1 {
			// What RealTime sets, while nobody holds the lock: a run
			// killed before it restored. The kernel starts its softirq
			// threads at the fair class, nice 0.
			a = &unix.SchedAttr{Policy: unix.SCHED_NORMAL}
		}
		if err := unix.SchedSetAttr(pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
			err = fmt.Errorf("making ksoftirqd (pid %d) real-time: %w", pid, err)
			if back := errors.Join(s.restore(former), lock.Close()); back != nil {
				return errors.Join(err, back)
			}
			if errors.Is(err, unix.EPERM) {
				// Refused (no CAP_SYS_NICE over the threads, a
				// security policy), and every thread as it was.
				return fmt.Errorf("%w: %w", ErrSoftirqUnavailable, err)
			}
			return err
		}
		former = append(former, *a)
	}
	s.former, s.lock = former, lock
	return nil
}

// Restore gives each thread back the scheduling RealTime found and
// releases the lock; it does nothing if RealTime did not run.
func (s *SoftirqThreads) Restore() error {
	if s.lock == nil {
		return nil
	}
	err := errors.Join(s.restore(s.former), s.lock.Close())
	s.former, s.lock = nil, nil
	return err
}

func (s *SoftirqThreads) restore(former []unix.SchedAttr) error {
	var errs []error
	for i, a := range former {
		a.Size = unix.SizeofSchedAttr
		if err := unix.SchedSetAttr(s.Pids[i], &a, 0); err != nil {
			errs = append(errs, fmt.Errorf("restoring ksoftirqd (pid %d)'s scheduling: %w", s.Pids[i], err))
		}
	}
	return errors.Join(errs...)
}
