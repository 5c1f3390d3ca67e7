// Package proc reads the few facts about processes that ipfailover needs
// from a proc file system: the process list, a process's state, parent and
// name, its signal masks and namespace pids, and the pidfds this process
// holds. Everything is read below one root directory, /proc on a host and a
// fixture tree in tests, as node_exporter does with --path.procfs.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultRoot is where the host's proc file system is mounted.
const DefaultRoot = "/proc"

// FS is a proc file system mounted at a root directory. The zero FS reads
// DefaultRoot.
type FS struct {
	// Root is where the file system is mounted; "" means DefaultRoot.
	Root string
}

func (fs FS) dir() string {
	if fs.Root == "" {
		return DefaultRoot
	}
	return fs.Root
}

func (fs FS) path(pid int, name string) string {
	return filepath.Join(fs.dir(), strconv.Itoa(pid), name)
}

// PIDs lists the processes the file system shows, in its order.
func (fs FS) PIDs() ([]int, error) {
	entries, err := os.ReadDir(fs.dir())
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Stat is what ipfailover reads from /proc/<pid>/stat.
type Stat struct {
	// Comm is the command name, as in /proc/<pid>/comm.
	Comm string
	// State is the state letter: R, S, D, T, Z, X...
	State byte
	// PPID is the parent's pid.
	PPID int
}

// Stat reads /proc/<pid>/stat.
func (fs FS) Stat(pid int) (Stat, error) {
	name := fs.path(pid, "stat")
	b, err := os.ReadFile(name)
	if err != nil {
		return Stat{}, err
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("%s: no command name", name)
	}
	fields := bytes.Fields(b[closing+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return Stat{}, fmt.Errorf("%s: malformed", name)
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return Stat{}, fmt.Errorf("%s: parent pid: %w", name, err)
	}
	return Stat{Comm: string(b[open+1 : closing]), State: fields[0][0], PPID: ppid}, nil
}

// Status is what ipfailover reads from /proc/<pid>/status.
type Status struct {
	// NSpid is the pid in each PID namespace the process is in, from the
	// outermost to its own.
	NSpid []int
	// SigBlk and SigCgt are the masks of blocked and caught signals; bit
	// n-1 is signal n.
	SigBlk, SigCgt uint64
}

// Status reads /proc/<pid>/status.
func (fs FS) Status(pid int) (Status, error) {
	name := fs.path(pid, "status")
	b, err := os.ReadFile(name)
	if err != nil {
		return Status{}, err
	}
	var st Status
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v := string(bytes.TrimSpace(value))
		switch string(key) {
		case "NSpid":
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return Status{}, fmt.Errorf("%s: NSpid %q: %w", name, v, err)
				}
				st.NSpid = append(st.NSpid, n)
			}
		case "SigBlk", "SigCgt":
			mask, err := strconv.ParseUint(v, 16, 64)
			if err != nil {
				return Status{}, fmt.Errorf("%s: %s %q: %w", name, key, v, err)
			}
			if string(key) == "SigBlk" {
				st.SigBlk = mask
			} else {
				st.SigCgt = mask
			}
		}
	}
	return st, nil
}

// Handles reports whether the process blocks or catches sig.
func (st Status) Handles(sig syscall.Signal) bool {
	bit := uint64(1) << (uint(sig) - 1)
	return (st.SigBlk|st.SigCgt)&bit != 0
}

// HandlesSignal reports whether pid blocks or catches sig. A process that
// does neither gets the signal's default action, which for SIGHUP and the
// real-time signals is to die: keepalived sets its signals up only some
// milliseconds after it starts (it blocks them and reads them from a
// signalfd, so SigBlk is the mask that counts).
func (fs FS) HandlesSignal(pid int, sig syscall.Signal) (bool, error) {
	if sig < 1 || sig > 64 {
		return false, fmt.Errorf("signal %d out of range", sig)
	}
	st, err := fs.Status(pid)
	if err != nil {
		return false, err
	}
	return st.Handles(sig), nil
}

// Exe returns the path of pid's executable, without the " (deleted)" the
// kernel appends when the file was replaced.
func (fs FS) Exe(pid int) (string, error) {
	exe, err := os.Readlink(fs.path(pid, "exe"))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(exe, " (deleted)"), nil
}

// HoldsPidfd reports whether the process reading the file system (its
// "self" entry) holds a pidfd referring to pid.
func (fs FS) HoldsPidfd(pid int) bool {
	self := filepath.Join(fs.dir(), "self")
	fds, err := os.ReadDir(filepath.Join(self, "fd"))
	if err != nil {
		return false
	}
	want := []byte("Pid:\t" + strconv.Itoa(pid) + "\n")
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(self, "fd", fd.Name()))
		if err != nil || link != "anon_inode:[pidfd]" {
			continue
		}
		info, err := os.ReadFile(filepath.Join(self, "fdinfo", fd.Name()))
		if err == nil && bytes.Contains(info, want) {
			return true
		}
	}
	return false
}
