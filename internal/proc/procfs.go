// Package procfs reads the few facts about a process that ipfailover needs
// from /proc: its state and parent, and whether it has set up a signal.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// PIDs lists the processes /proc shows, in its order.
func PIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc")
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

// Stat returns pid's state letter (R, S, D, T, Z, X, ...) and its parent's
// pid, from /proc/<pid>/stat.
func Stat(pid int) (state byte, ppid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: parent pid: %w", pid, err)
	}
	return fields[0][0], ppid, nil
}

// HandlesSignal reports whether pid blocks or catches sig, from the SigBlk
// and SigCgt masks in /proc/<pid>/status. A process that does neither gets
// the signal's default action, which for SIGHUP and the real-time signals
// is to die: keepalived sets its signals up only some milliseconds after it
// starts (it blocks them and reads them from a signalfd, so SigBlk is the
// mask that counts).
func HandlesSignal(pid int, sig syscall.Signal) (bool, error) {
	if sig < 1 || sig > 64 {
		return false, fmt.Errorf("signal %d out of range", sig)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	bit := uint64(1) << (uint(sig) - 1)
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(name) != "SigBlk" && string(name) != "SigCgt" {
			continue
		}
		mask, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 16, 64)
		if err == nil && mask&bit != 0 {
			return true, nil
		}
	}
	return false, nil
}
