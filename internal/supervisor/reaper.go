package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipfailover/ipfailover/internal/proc"
)

// Reaper reaps zombie children of this process; see the package
// documentation for which ones it leaves to their own waiters. A process
// should run one Reaper (several are safe, only wasteful).
type Reaper struct {
	logger *slog.Logger
	proc   proc.FS // the host's /proc

	// mu is held while a pass reaps and while a child is started and
	// registered, so that no child can be reaped before it is registered.
	mu       sync.Mutex
	watched  map[int]chan<- unix.WaitStatus // supervised: reap and dispatch
	external map[int]struct{}               // started by Start: never reap

	kick    chan struct{}
	orphans atomic.Int64
}

// NewReaper returns a Reaper that logs to logger (slog.Default() when nil).
// Unless this process is PID 1 it makes it a child subreaper right away, so
// that orphans created before Run starts are adopted too; reaping starts with
// Run.
func NewReaper(logger *slog.Logger) *Reaper {
	if logger == nil {
		logger = slog.Default()
	}
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			logger.Warn("cannot become a child subreaper; orphans will not be reaped here", "error", err)
		}
	}
	return &Reaper{
		logger:   logger,
		watched:  make(map[int]chan<- unix.WaitStatus),
		external: make(map[int]struct{}),
		kick:     make(chan struct{}, 1),
	}
}

// Run reaps zombies now and on every SIGCHLD until ctx is done, then
// returns nil.
func (r *Reaper) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	defer signal.Stop(sigs)
	for {
		// A SIGCHLD that arrives during a pass is kept in the buffer, so
		// no zombie is left behind until the next one.
		r.pass()
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
		case <-r.kick:
		}
	}
}

// Reaped returns how many orphans (children nobody else waits for) have been
// reaped so far.
func (r *Reaper) Reaped() int { return int(r.orphans.Load()) }

// Start starts cmd with its pid registered so that this Reaper never reaps
// it; the caller must then call r.Wait(cmd). Only needed where pidfds do not
// work (see the package documentation); harmless everywhere.
func (r *Reaper) Start(cmd *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.external[cmd.Process.Pid] = struct{}{}
	return nil
}

// Wait waits for a command started with r.Start and unregisters it.
func (r *Reaper) Wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	r.mu.Lock()
	delete(r.external, cmd.Process.Pid)
	r.mu.Unlock()
	r.poke()
	return err
}

// RunCommand runs cmd like cmd.Run, safe from this Reaper.
func (r *Reaper) RunCommand(cmd *exec.Cmd) error {
	if err := r.Start(cmd); err != nil {
		return err
	}
	return r.Wait(cmd)
}

// startWatched calls start (which starts a child and returns its pid) under
// the lock and registers the pid; its wait status is sent on the returned
// channel (buffered) once the child is reaped.
func (r *Reaper) startWatched(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.watched[pid] = ch
	return pid, ch, nil
}

func (r *Reaper) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// pass reaps every zombie child it may reap.
func (r *Reaper) pass() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		pid, err := peekZombie()
		if err != nil || pid == 0 {
			return // ECHILD (no children at all) or no zombie
		}
		if !r.mayReap(pid) {
			// It hides the zombies behind it from waitid: find them in /proc.
			r.scan()
			return
		}
		if !r.reap(pid) {
			return
		}
	}
}

// scan reaps the zombie children listed in /proc that nobody else waits for.
func (r *Reaper) scan() {
	pids, err := r.zombieChildren(os.Getpid())
	if err != nil {
		r.logger.Warn("listing zombie children", "error", err)
		return
	}
	for _, pid := range pids {
		if r.mayReap(pid) {
			r.reap(pid)
		}
	}
}

func (r *Reaper) mayReap(pid int) bool {
	if _, ok := r.watched[pid]; ok {
		return true
	}
	if _, ok := r.external[pid]; ok {
		return false
	}
	return !r.proc.HoldsPidfd(pid)
}

// reap reaps pid (a zombie) and dispatches or counts it. It reports whether
// the pid was reaped.
func (r *Reaper) reap(pid int) bool {
	var ws unix.WaitStatus
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	for errors.Is(err, unix.EINTR) {
		got, err = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
	if err != nil || got != pid {
		return false
	}
	if ch, ok := r.watched[pid]; ok {
		delete(r.watched, pid)
		ch <- ws
		return true
	}
	r.orphans.Add(1)
	r.logger.Debug("reaped orphan", "pid", pid, "status", statusString(ws))
	return true
}

// peekZombie returns the pid of a zombie child without reaping it, 0 when
// there is none.
func peekZombie() (int, error) {
	var info unix.Siginfo
	for {
		info = unix.Siginfo{}
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return siginfoPid(&info), nil
	}
}

// siginfoPid returns si_pid: after si_signo, si_errno, si_code (and, on 64-bit
// platforms, 4 bytes of padding to align the union).
func siginfoPid(info *unix.Siginfo) int {
	off := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// zombieChildren lists the zombie children of ppid from /proc.
func (r *Reaper) zombieChildren(ppid int) ([]int, error) {
	all, err := r.proc.PIDs()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, pid := range all {
		st, err := r.proc.Stat(pid)
		if err == nil && st.PPID == ppid && st.State == 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// statusString describes a wait status the way exec.ExitError does.
func statusString(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	default:
		return fmt.Sprintf("wait status %#x", uint32(ws))
	}
}
