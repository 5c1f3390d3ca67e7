package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipfailover/ipfailover/internal/proc"
)

// StopExisting stops the keepalived named by pidFile, if any: when the file
// names a live process whose /proc/<pid>/comm or exe is keepalived, it gets
// SIGTERM and up to timeout to exit (time for its priority-0 adverts), then
// SIGKILL. stopped reports whether such a process was found and is gone. A
// missing pid file, a stale pid or a pid of another program is no error
// (stopped is false). When SIGKILL was needed, stopped is true and err says so.
//
// The process is signalled through a pidfd opened before its name is
// checked, so a recycled pid can never be signalled by mistake.
func StopExisting(fs proc.FS, pidFile string, timeout time.Duration) (stopped bool, err error) {
	data, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading keepalived pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return false, fmt.Errorf("keepalived pid file %s: %q is not a pid", pidFile, strings.TrimSpace(string(data)))
	}
	if pid == os.Getpid() {
		return false, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("opening pid %d from %s: %w", pid, pidFile, err)
	}
	defer unix.Close(fd)
	if !isKeepalived(fs, pid) {
		return false, nil
	}
	// The pidfd still refers to the process that had pid when it was
	// opened; if that one is still alive, /proc/<pid> was about it too.
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("checking keepalived pid %d: %w", pid, err)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return true, nil
		}
		return false, fmt.Errorf("sending SIGTERM to keepalived pid %d: %w", pid, err)
	}
	if gone, err := waitPidfd(fd, timeout); err != nil || gone {
		return gone, err
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return false, fmt.Errorf("sending SIGKILL to keepalived pid %d: %w", pid, err)
	}
	gone, err := waitPidfd(fd, timeout)
	if err != nil {
		return false, err
	}
	if !gone {
		return false, fmt.Errorf("keepalived pid %d survived SIGKILL for %s", pid, timeout)
	}
	return true, fmt.Errorf("keepalived pid %d ignored SIGTERM for %s and was killed", pid, timeout)
}

// isKeepalived reports whether pid runs keepalived.
func isKeepalived(fs proc.FS, pid int) bool {
	if st, err := fs.Stat(pid); err == nil && st.Comm == "keepalived" {
		return true
	}
	exe, err := fs.Exe(pid)
	return err == nil && filepath.Base(exe) == "keepalived"
}

// waitPidfd waits up to timeout for the process behind fd to exit.
func waitPidfd(fd int, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("waiting for keepalived to exit: %w", err)
		}
		if n > 0 {
			return true, nil
		}
		if left == 0 {
			return false, nil
		}
	}
}
