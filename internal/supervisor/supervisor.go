package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/proc"
)

// Defaults for Options.
const (
	DefaultStopTimeout     = 10 * time.Second
	DefaultBackoffMin      = 100 * time.Millisecond
	DefaultBackoffMax      = 5 * time.Second
	DefaultCrashLoopDeaths = 5
	DefaultCrashLoopWindow = time.Minute
)

// outputDrain bounds how long Run keeps copying keepalived's output after
// the last keepalived exited (an orphan may hold the pipe open).
const outputDrain = time.Second

// ErrNotRunning is returned by Reload when keepalived is not running.
var ErrNotRunning = errors.New("keepalived is not running")

// Options configure a Supervisor. Binary is required; other zero values take
// the defaults above.
type Options struct {
	// Binary is the keepalived executable (keepalived.FindBinary()).
	Binary string
	// Args follow argv[0]; build them with Args.
	Args []string
	// Env is keepalived's environment; nil means this process's.
	Env []string
	// Stdout and Stderr receive keepalived's output (default os.Stdout
	// and os.Stderr): keepalived writes into a pipe, and every byte it
	// writes is copied on unchanged, except its notices of JSON dump
	// signals (see copyOutput).
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	// PIDFile is keepalived's own pid file (default keepalived.PIDFile). It
	// is only read, before the first start, to stop a keepalived left
	// running by someone else.
	PIDFile string
	// StopTimeout is how long keepalived gets between SIGTERM and SIGKILL.
	StopTimeout time.Duration
	// Restart delays double from BackoffMin up to BackoffMax.
	BackoffMin, BackoffMax time.Duration
	// CrashLoopDeaths deaths within CrashLoopWindow end Run with an error.
	CrashLoopDeaths int
	CrashLoopWindow time.Duration
	// Proc is the proc file system keepalived's state is read from; the
	// zero FS is the host's /proc.
	Proc proc.FS
	// Reaper reaps keepalived and orphans. nil: Run runs its own for its
	// lifetime. A program that also runs other commands should run one
	// Reaper and pass it here.
	Reaper *Reaper
	// Died, when set, gets every death of keepalived that Run restarts
	// (or ends on, in a crash loop) after: its exit status, how long it
	// ran, and the delay before its restart.
	Died func(status string, uptime, restartIn time.Duration)
}

// Args returns keepalived's arguments for config: in the foreground, logging
// to the console (its standard error), not to syslog unless syslog is true,
// then the extra flags (see ExtraFlags).
//
// keepalived logs every line to syslog as well as to the console. Where no
// syslog daemon listens (a container, a network namespace on a bare host),
// the C library then writes the line to /dev/console instead: on a host
// whose console is a serial port (115,200 baud: about 11 kB a second for all
// keepalived processes together) a keepalived that logs faster (a fleet of
// 254 instances at 0.2 s in turmoil) blocks on it, sends its adverts late,
// and its peers take its VIPs. The console copy duplicates the standard
// error ipfailover passes on, so it is never wanted. A container started
// without a terminal has no /dev/console: there the copy only costs two
// failed system calls per line.
func Args(config string, extra []string, syslog bool) []string {
	args := []string{"-n", "--log-console"}
	if !syslog {
		args = append(args, "--no-syslog")
	}
	return append(append(args, "-f", config), extra...)
}

// SyslogSocket is where the C library's syslog sends its lines.
const SyslogSocket = "/dev/log"

// HasSyslog reports whether a syslog daemon's socket is at path (a
// container that mounts the host's /dev/log keeps keepalived's syslog).
func HasSyslog(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// ExitStatus is how a keepalived process ended.
type ExitStatus struct {
	PID    int
	Code   int            // exit code; -1 when killed by a signal
	Signal syscall.Signal // 0 unless killed by a signal
	Time   time.Time
}

func (e ExitStatus) String() string {
	if e.Signal != 0 {
		return "signal: " + e.Signal.String()
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Supervisor runs one keepalived at a time. Create it with New.
type Supervisor struct {
	opts   Options
	logger *slog.Logger

	mu      sync.Mutex
	ran     bool
	proc    *os.Process
	started chan struct{} // closed while proc runs
	// stopping is set as Run stops keepalived, before its SIGTERM.
	stopping bool
	restarts int
	deaths   int
	lastExit ExitStatus
}

// New returns a Supervisor with opts' zero values replaced by defaults.
func New(opts Options) *Supervisor {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PIDFile == "" {
		opts.PIDFile = keepalived.PIDFile
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = DefaultBackoffMin
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(DefaultBackoffMax, opts.BackoffMin)
	}
	if opts.CrashLoopDeaths <= 0 {
		opts.CrashLoopDeaths = DefaultCrashLoopDeaths
	}
	if opts.CrashLoopWindow <= 0 {
		opts.CrashLoopWindow = DefaultCrashLoopWindow
	}
	return &Supervisor{opts: opts, logger: opts.Logger, started: make(chan struct{})}
}

// PID returns keepalived's pid, 0 when it is not running.
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

// Stopping reports whether Run is stopping keepalived, or has stopped it:
// true from just before its SIGTERM on (a Supervisor runs once). A
// stopping keepalived removes the VIPs it added at once, and says so on
// its notify FIFO only as it exits (about a second later in a lab run).
func (s *Supervisor) Stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Running reports whether keepalived is running.
func (s *Supervisor) Running() bool { return s.PID() != 0 }

// Started returns a channel that is closed while keepalived runs: already
// closed when it runs now, otherwise closed at its next start.
func (s *Supervisor) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Restarts returns how many times keepalived was restarted after dying.
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Deaths returns how many times keepalived died without being asked to stop.
func (s *Supervisor) Deaths() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deaths
}

// LastExit returns how the last keepalived process ended (after a death or a
// stop); ok is false when none has ended yet.
func (s *Supervisor) LastExit() (status ExitStatus, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastExit, s.lastExit.PID != 0
}

// reloadWait bounds how long Reload waits for a keepalived that has only just
// started to set up its signal handling.
const reloadWait = 5 * time.Second

// Reload sends SIGHUP to keepalived, which re-reads its configuration and
// keeps running. SIGHUP's default action is to end a process, and keepalived
// sets up its signals some milliseconds after it starts: a keepalived that
// does not block or catch SIGHUP yet gets it once it does (it may have read
// the configuration by then; the reload makes sure it runs the new one), and
// Reload waits at most reloadWait for that.
func (s *Supervisor) Reload() error {
	deadline := time.Now().Add(reloadWait)
	for {
		s.mu.Lock()
		kp := s.proc
		if kp == nil {
			s.mu.Unlock()
			return ErrNotRunning
		}
		ready, err := s.opts.Proc.HandlesSignal(kp.Pid, unix.SIGHUP)
		if err == nil && ready {
			err = kp.Signal(unix.SIGHUP)
			s.mu.Unlock()
			if err != nil {
				return fmt.Errorf("reloading keepalived (pid %d): %w", kp.Pid, err)
			}
			s.logger.Info("reloading keepalived", "pid", kp.Pid)
			return nil
		}
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("reloading keepalived (pid %d): %w", kp.Pid, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reloading keepalived (pid %d): it has not set up SIGHUP within %v of the request, and SIGHUP would end it", kp.Pid, reloadWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run starts keepalived and keeps it running until ctx is done, then stops it
// gracefully. It returns nil after a stop, and an error when keepalived cannot
// be started or dies CrashLoopDeaths times within CrashLoopWindow. A
// Supervisor runs once.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return errors.New("supervisor: Run called twice")
	}
	s.ran = true
	s.mu.Unlock()
	if s.opts.Binary == "" {
		return errors.New("supervisor: Options.Binary is required")
	}

	reaper := s.opts.Reaper
	if reaper == nil {
		reaper = NewReaper(s.logger)
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = reaper.Run(rctx)
		}()
		defer func() {
			cancel()
			<-done
		}()
	}

	out, err := newOutputs(s.opts.Stdout, s.opts.Stderr)
	if err != nil {
		return fmt.Errorf("keepalived output: %w", err)
	}
	defer out.close()

	if stopped, err := StopExisting(s.opts.Proc, s.opts.PIDFile, s.opts.StopTimeout); err != nil {
		s.logger.Warn("stopping keepalived left running", "pid_file", s.opts.PIDFile, "error", err)
	} else if stopped {
		s.logger.Info("stopped keepalived left running", "pid_file", s.opts.PIDFile)
	}

	var deathTimes []time.Time
	for {
		exited, err := s.start(reaper, out)
		if err != nil {
			return err
		}
		startedAt := time.Now()
		select {
		case ws := <-exited:
			status := s.exited(ws, true)
			now := time.Now()
			deathTimes = append(deathTimes, now)
			for len(deathTimes) > 0 && now.Sub(deathTimes[0]) > s.opts.CrashLoopWindow {
				deathTimes = deathTimes[1:]
			}
			s.logger.Warn("keepalived died", "pid", status.PID, "status", status.String(),
				"uptime", now.Sub(startedAt).Round(time.Millisecond).String())
			s.drainGroup(status.PID)
			delay := s.backoff(len(deathTimes))
			if s.opts.Died != nil {
				s.opts.Died(status.String(), now.Sub(startedAt), delay)
			}
			if len(deathTimes) >= s.opts.CrashLoopDeaths {
				return fmt.Errorf("keepalived crash loop: %d deaths within %s, last %s",
					len(deathTimes), s.opts.CrashLoopWindow, status)
			}
			s.logger.Info("restarting keepalived", "delay", delay.String(), "recent_deaths", len(deathTimes))
			timer := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				timer.Stop()
				s.logger.Info("keepalived stopped", "reason", "shutdown during restart delay")
				return nil
			case <-timer.C:
			}
			s.mu.Lock()
			s.restarts++
			s.mu.Unlock()
		case <-ctx.Done():
			return s.stop(exited)
		}
	}
}

// backoff returns the delay before restart after n recent deaths.
func (s *Supervisor) backoff(n int) time.Duration {
	d := s.opts.BackoffMin
	for i := 1; i < n && d < s.opts.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.opts.BackoffMax)
}

// start starts keepalived and returns the channel its wait status arrives on.
func (s *Supervisor) start(reaper *Reaper, out *outputs) (<-chan unix.WaitStatus, error) {
	env := s.opts.Env
	if env == nil {
		env = os.Environ()
	}
	argv := append([]string{s.opts.Binary}, s.opts.Args...)
	var started *os.Process
	pid, exited, err := reaper.startWatched(func() (int, error) {
		p, err := os.StartProcess(s.opts.Binary, argv, &os.ProcAttr{
			Env:   env,
			Files: []*os.File{out.stdin, out.stdout, out.stderr},
			// Its own process group, which its VRRP and checker
			// children join: see drainGroup.
			Sys: &syscall.SysProcAttr{Setpgid: true},
		})
		if err != nil {
			return 0, err
		}
		started = p
		return p.Pid, nil
	})
	if err != nil {
		return nil, fmt.Errorf("starting keepalived: %w", err)
	}
	s.mu.Lock()
	s.proc = started
	close(s.started)
	s.mu.Unlock()
	s.logger.Info("keepalived started", "pid", pid, "args", argv)
	return exited, nil
}

// exited records the end of the current process.
func (s *Supervisor) exited(ws unix.WaitStatus, death bool) ExitStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := ExitStatus{PID: s.proc.Pid, Code: ws.ExitStatus(), Time: time.Now()}
	if ws.Signaled() {
		status.Signal = ws.Signal()
	}
	s.proc.Release()
	s.proc = nil
	s.started = make(chan struct{})
	s.lastExit = status
	if death {
		s.deaths++
	}
	return status
}

// minKillWait is the least time a SIGKILLed process gets to be gone. SIGKILL
// cannot be caught or ignored: only a process held up in the kernel (or not
// yet scheduled on a busy machine) is still there after it, and giving up
// leaves it running.
const minKillWait = 5 * time.Second

// killWait is how long to wait for processes after SIGKILL: StopTimeout, but
// at least minKillWait.
func (s *Supervisor) killWait() time.Duration {
	return max(s.opts.StopTimeout, minKillWait)
}

// stop sends SIGTERM, waits up to StopTimeout for keepalived to exit (it
// sends its priority-0 adverts and removes its VIPs meanwhile), then
// SIGKILL. A keepalived that outlives SIGKILL is abandoned: no longer
// reported as running, and an error.
func (s *Supervisor) stop(exited <-chan unix.WaitStatus) error {
	s.mu.Lock()
	kp := s.proc
	s.stopping = true
	s.mu.Unlock()
	begin := time.Now()
	s.logger.Info("stopping keepalived", "pid", kp.Pid, "timeout", s.opts.StopTimeout.String())
	if err := kp.Signal(unix.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.logger.Warn("sending SIGTERM to keepalived", "pid", kp.Pid, "error", err)
	}
	timer := time.NewTimer(s.opts.StopTimeout)
	defer timer.Stop()
	var ws unix.WaitStatus
	select {
	case ws = <-exited:
	case <-timer.C:
		s.logger.Warn("keepalived did not exit after SIGTERM; sending SIGKILL", "pid", kp.Pid,
			"timeout", s.opts.StopTimeout.String())
		if err := kp.Signal(unix.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.logger.Warn("sending SIGKILL to keepalived", "pid", kp.Pid, "error", err)
		}
		timer.Reset(s.killWait())
		select {
		case ws = <-exited:
		case <-timer.C:
			s.abandon()
			return fmt.Errorf("keepalived (pid %d) survived SIGKILL for %s: abandoned", kp.Pid, s.killWait())
		}
	}
	status := s.exited(ws, false)
	s.drainGroup(status.PID)
	s.logger.Info("keepalived stopped", "pid", status.PID, "status", status.String(),
		"took", time.Since(begin).Round(time.Millisecond).String())
	return nil
}

// abandon forgets the current process without its exit: PID and Running
// no longer report it. The reaper still reaps it should it ever exit.
func (s *Supervisor) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.Release()
	s.proc = nil
	s.started = make(chan struct{})
}

// drainGroup ends what is left of a dead keepalived's process group (its
// VRRP, checker and BFD children; check scripts run in groups of their own).
// When keepalived is killed, its children live on for a while; a new
// keepalived started meanwhile finds their pid files and exits ("daemon is
// already running"), and the old VRRP child still holds the VIPs. So the
// group gets SIGTERM (the children then send their priority-0 adverts and
// remove their VIPs), StopTimeout to exit, then SIGKILL. The reaper reaps
// them, and a process group id cannot be reused while the group has members.
func (s *Supervisor) drainGroup(pgid int) {
	if unix.Kill(-pgid, 0) != nil {
		return // empty
	}
	s.logger.Info("stopping the rest of keepalived's process group", "pgid", pgid, "timeout", s.opts.StopTimeout.String())
	_ = unix.Kill(-pgid, unix.SIGTERM)
	if waitGroupEmpty(pgid, s.opts.StopTimeout) {
		return
	}
	s.logger.Warn("keepalived's process group did not exit after SIGTERM; sending SIGKILL", "pgid", pgid)
	_ = unix.Kill(-pgid, unix.SIGKILL)
	if !waitGroupEmpty(pgid, s.killWait()) {
		s.logger.Error("keepalived's process group survived SIGKILL", "pgid", pgid)
	}
}

// waitGroupEmpty polls until process group pgid has no member (zombies
// count until reaped), up to timeout.
func waitGroupEmpty(pgid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for unix.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// outputs holds the files keepalived gets as stdin, stdout and stderr, and
// the copiers from their pipes to the writers.
type outputs struct {
	stdin, stdout, stderr *os.File
	toClose               []*os.File // our ends, closed after the last start
	copies                []*os.File // read ends being copied
	wg                    sync.WaitGroup
}

func newOutputs(stdout, stderr io.Writer) (*outputs, error) {
	o := &outputs{}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	o.stdin = null
	o.toClose = append(o.toClose, null)
	if o.stdout, err = o.file(stdout); err != nil {
		o.close()
		return nil, err
	}
	if o.stderr, err = o.file(stderr); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

// file returns the write end of a pipe to hand keepalived, whose output
// copyOutput copies to w.
func (o *outputs) file(w io.Writer) (*os.File, error) {
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// Best effort: room for a burst of transitions' lines while this
	// process is not scheduled, so that keepalived does not block on a
	// write (and send its adverts late) before the copier reads.
	_, _ = unix.FcntlInt(pw.Fd(), unix.F_SETPIPE_SZ, outputPipeSize)
	o.toClose = append(o.toClose, pw)
	o.copies = append(o.copies, r)
	o.wg.Go(func() { copyOutput(w, r) })
	return pw, nil
}

// close closes our ends and lets the copiers drain for up to outputDrain.
func (o *outputs) close() {
	for _, f := range o.toClose {
		f.Close()
	}
	for _, r := range o.copies {
		_ = r.SetReadDeadline(time.Now().Add(outputDrain))
	}
	o.wg.Wait()
	for _, r := range o.copies {
		r.Close()
	}
}
