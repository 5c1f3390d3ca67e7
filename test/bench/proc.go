package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// RSS returns VmRSS of pid in bytes.
func RSS(pid int) (int64, error) {
	m, err := Memory(pid)
	return m["VmRSS"], err
}

// Memory returns the kB fields of /proc/<pid>/status (VmRSS, RssAnon,
// RssFile, VmHWM...) in bytes.
func Memory(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		m[name] = kb << 10
	}
	if _, ok := m["VmRSS"]; !ok {
		return nil, fmt.Errorf("/proc/%d/status: no VmRSS (a zombie?)", pid)
	}
	return m, nil
}

// Startup is when a started entrypoint reached each step, measured by
// polling /proc from outside the node.
type Startup struct {
	// Exec is when the process image became the entrypoint (its comm
	// changed from the launcher's).
	Exec time.Time
	// Config is when keepalived.conf appeared in the node's mount
	// namespace, Keepalived when keepalived's pid file did and named a live
	// keepalived process.
	Config, Keepalived time.Time
	// Resolution is the longest time between two polls.
	Resolution time.Duration
}

// WatchStartup polls the process pid (the launcher that execs into the
// program called comm) every interval until keepalived runs or ctx ends.
// configPath is keepalived.conf's path inside the node.
func WatchStartup(ctx context.Context, pid int, comm, configPath string, interval time.Duration) (Startup, error) {
	var s Startup
	root := fmt.Sprintf("/proc/%d/root", pid)
	prev := time.Now()
	for {
		now := time.Now()
		s.Resolution = max(s.Resolution, now.Sub(prev))
		prev = now
		if s.Exec.IsZero() {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil {
				return s, fmt.Errorf("process %d gone before it started %s: %w", pid, comm, err)
			}
			if strings.TrimSpace(string(b)) == comm {
				s.Exec = now
			}
		}
		if !s.Exec.IsZero() && s.Config.IsZero() {
			if _, err := os.Stat(root + configPath); err == nil {
				s.Config = now
			}
		}
		if !s.Config.IsZero() && s.Keepalived.IsZero() && keepalivedRunning(pid, root) {
			s.Keepalived = now
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("waiting for keepalived in process %d: %w", pid, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}

// keepalivedRunning reads keepalived's pid file in the process's mount
// namespace and checks that a keepalived child of pid runs with that pid.
func keepalivedRunning(pid int, root string) bool {
	b, err := os.ReadFile(root + "/run/keepalived.pid")
	if err != nil {
		return false
	}
	nsPid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || nsPid <= 0 {
		return false // being written
	}
	// The pid file holds the pid inside the node's PID namespace; find the
	// child that has it.
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, k := range strings.Fields(string(kids)) {
			if inner, comm := nsPidOf(k); inner == nsPid && comm == "keepalived" {
				return true
			}
		}
	}
	return false
}

func nsPidOf(pid string) (int, string) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, ""
	}
	var inner int
	var comm string
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Name:"); ok {
			comm = strings.TrimSpace(rest)
		}
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				inner, _ = strconv.Atoi(f[len(f)-1])
			}
		}
	}
	return inner, comm
}
