package metrics

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/proc"
)

// dump is one parsed JSON dump.
type dump struct {
	pid       int
	at        time.Time
	instances []keepalived.VRRPInstance
}

// flight is a dump in progress that concurrent scrapes wait for.
type flight struct {
	done chan struct{}
	d    *dump
	err  error
}

// dumper asks keepalived for JSON dumps. Concurrent callers share one dump, and a dump younger
// than maxAge is handed out again without asking keepalived.
type dumper struct {
	proc    proc.FS
	binary  string
	path    string
	timeout time.Duration
	maxAge  time.Duration

	sigMu sync.Mutex
	sig   syscall.Signal

	mu       sync.Mutex
	inflight *flight
	last     *dump

	// duration observes the time of every dump attempt that signalled keepalived.
	duration prometheus.Observer
	signals  atomic.Int64
}

// get returns a dump of the keepalived with the given PID, fresh enough for maxAge.
func (d *dumper) get(pid int) (*dump, error) { return d.getWithin(pid, d.maxAge) }

// getWithin returns a dump of the keepalived with the given PID younger than maxAge: the
// latest one, or one in flight, or a new one.
func (d *dumper) getWithin(pid int, maxAge time.Duration) (*dump, error) {
	d.mu.Lock()
	if l := d.last; l != nil && l.pid == pid && time.Since(l.at) < maxAge {
		d.mu.Unlock()
		return l, nil
	}
	if f := d.inflight; f != nil {
		d.mu.Unlock()
		<-f.done
		if f.err == nil && f.d.pid != pid {
			return nil, fmt.Errorf("keepalived changed from pid %d to %d during the dump", f.d.pid, pid)
		}
		return f.d, f.err
	}
	f := &flight{done: make(chan struct{})}
	d.inflight = f
	d.mu.Unlock()
	// Deferred, so that a fetch that panics (net/http recovers the
	// handler) still releases the requests waiting on it.
	defer func() {
		if f.d == nil && f.err == nil {
			f.err = errors.New("reading keepalived's dump failed")
		}
		d.mu.Lock()
		d.inflight = nil
		if f.err == nil {
			d.last = f.d
		}
		d.mu.Unlock()
		close(f.done)
	}()
	f.d, f.err = d.fetch(pid)
	return f.d, f.err
}

// signal returns keepalived's JSON dump signal, asking `keepalived --signum=JSON` once.
func (d *dumper) signal() (syscall.Signal, error) {
	d.sigMu.Lock()
	defer d.sigMu.Unlock()
	if d.sig != 0 {
		return d.sig, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sig, err := keepalived.Signum(ctx, d.binary, "JSON")
	if err != nil {
		return 0, err
	}
	d.sig = sig
	return sig, nil
}

// fetch signals keepalived and waits, until the deadline, for a fresh dump that parses.
//
// keepalived 2.2.7 creates a temporary file next to the dump, renames it over the dump and only
// then writes the JSON and closes it, so a reader can meet an empty or half-written file under
// the new name. A dump counts as fresh when an inotify event for its name arrives after the
// signal, or when its inode or modification time differs from before the signal; a fresh file
// that does not parse yet is read again at the next event.
func (d *dumper) fetch(pid int) (*dump, error) {
	if pid <= 0 {
		return nil, errors.New("keepalived is not running")
	}
	sig, err := d.signal()
	if err != nil {
		return nil, err
	}
	w, err := watchFile(d.path)
	if err != nil {
		return nil, err
	}
	defer w.close()

	// A keepalived that has only just started has not set up its signal
	// handling yet, and the default action of the dump signal is to kill
	// the process: signal only once it blocks or catches the signal.
	if ok, err := d.proc.HandlesSignal(pid, sig); err != nil {
		return nil, fmt.Errorf("keepalived pid %d: %w", pid, err)
	} else if !ok {
		return nil, fmt.Errorf("keepalived pid %d is still starting (signal %d not handled yet)", pid, sig)
	}

	before, statErr := os.Stat(d.path)
	deadline := time.Now().Add(d.timeout)
	if err := syscall.Kill(pid, sig); err != nil {
		return nil, fmt.Errorf("sending signal %d to keepalived pid %d: %w", sig, pid, err)
	}
	d.signals.Add(1)
	start := time.Now()
	defer func() { d.duration.Observe(time.Since(start).Seconds()) }()

	evented := false
	var parseErr error
	for {
		if fresh(before, statErr, d.path) || evented {
			b, err := os.ReadFile(d.path)
			if err == nil {
				var inst []keepalived.VRRPInstance
				inst, err = keepalived.ParseDump(b)
				if err == nil {
					return &dump{pid: pid, at: time.Now(), instances: inst}, nil
				}
			}
			parseErr = err
		}
		// Wake at least every 100 ms to notice a keepalived that died
		// after the signal, instead of waiting out the whole deadline.
		wake := time.Now().Add(100 * time.Millisecond)
		if deadline.Before(wake) {
			wake = deadline
		}
		ok, err := w.wait(wake)
		if errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(deadline) {
			if syscall.Kill(pid, 0) != nil {
				return nil, fmt.Errorf("keepalived pid %d exited before it wrote the dump", pid)
			}
			continue
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if parseErr != nil {
					return nil, fmt.Errorf("no complete dump in %s within %v after signalling pid %d: %w", d.path, d.timeout, pid, parseErr)
				}
				return nil, fmt.Errorf("no fresh dump in %s within %v after signalling pid %d", d.path, d.timeout, pid)
			}
			return nil, err
		}
		evented = evented || ok
	}
}

// fresh reports whether the file at path differs from the one seen before the signal.
func fresh(before os.FileInfo, beforeErr error, path string) bool {
	now, err := os.Stat(path)
	if err != nil {
		return false
	}
	if beforeErr != nil {
		return true
	}
	if !now.ModTime().Equal(before.ModTime()) {
		return true
	}
	bs, ok1 := before.Sys().(*syscall.Stat_t)
	ns, ok2 := now.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && (bs.Ino != ns.Ino || bs.Dev != ns.Dev)
}

// watcher is an inotify watch on the dump's directory, reporting events for the dump's name.
type watcher struct {
	f    *os.File
	name string
	buf  []byte
}

func watchFile(path string) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	dir := filepath.Dir(path)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watching %s: %w", dir, err)
	}
	// A non-blocking descriptor joins the runtime poller, so read deadlines work.
	return &watcher{f: os.NewFile(uintptr(fd), "inotify:"+dir), name: filepath.Base(path), buf: make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))}, nil
}

// wait blocks until events arrive or the deadline passes, and reports whether one of them
// names the dump (or the queue overflowed, which may have hidden one).
func (w *watcher) wait(deadline time.Time) (bool, error) {
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return false, err
	}
	n, err := w.f.Read(w.buf)
	if err != nil {
		return false, err
	}
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		// struct inotify_event: int32 wd, uint32 mask, uint32 cookie, uint32 len, name[len].
		mask := binary.NativeEndian.Uint32(w.buf[off+4:])
		nameLen := int(binary.NativeEndian.Uint32(w.buf[off+12:]))
		end := min(off+unix.SizeofInotifyEvent+nameLen, n)
		name := w.buf[off+unix.SizeofInotifyEvent : end]
		if mask&unix.IN_Q_OVERFLOW != 0 || string(bytes.TrimRight(name, "\x00")) == w.name {
			return true, nil
		}
		off += unix.SizeofInotifyEvent + nameLen
	}
	return false, nil
}

func (w *watcher) close() { w.f.Close() }
