package kube

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The cluster's processes live in one cgroup of every mounted hierarchy
// (cgroup v1 controllers, named v1 hierarchies, the v2 one), a child per
// machine: the daemons in the machine's cgroup, the kubelet's pods below it
// (its cgroupRoot). So a machine can be frozen, killed and measured as a
// whole, and Down finds every process the cluster ever started, forked or
// not.

// hierarchies returns the mount points of the cgroup hierarchies.
func hierarchies() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		out = append(out, f[4])
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy mounted")
	}
	return out, nil
}

// unified returns the mount point of the cgroup v2 hierarchy, or "".
func unified(hs []string) string {
	for _, h := range hs {
		var st syscall.Statfs_t
		if syscall.Statfs(h, &st) == nil && st.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
			return h
		}
	}
	return ""
}

// makeCgroup creates path (e.g. /ipfk-NAME/node1) in every hierarchy. A
// new cpuset cgroup gets its parent's CPUs and memory nodes, which v1
// leaves empty (no process could join it otherwise).
func makeCgroup(path string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h
		for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrExist) {
				continue
			} else if err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil || filepath.Base(h) != "cpuset" {
					continue
				}
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// procsFiles lists the cgroup.procs file of path in every hierarchy: a
// process writes its PID to each to join the cgroup.
func procsFiles(path string) ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		out = append(out, filepath.Join(h, path, "cgroup.procs"))
	}
	return out, nil
}

// cgroupPIDs lists the processes in path and below, in every hierarchy.
func cgroupPIDs(path string) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, h := range hs {
		root := filepath.Join(h, path)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil // removed meanwhile
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// freezeCgroup freezes (or thaws) every process in path and below: the v2
// hierarchy's cgroup.freeze where there is one, else the v1 freezer.
func freezeCgroup(path string, frozen bool) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	if u := unified(hs); u != "" {
		v := "0"
		if frozen {
			v = "1"
		}
		return os.WriteFile(filepath.Join(u, path, "cgroup.freeze"), []byte(v), 0o644)
	}
	for _, h := range hs {
		if filepath.Base(h) == "freezer" {
			v := "THAWED"
			if frozen {
				v = "FROZEN"
			}
			return os.WriteFile(filepath.Join(h, path, "freezer.state"), []byte(v), 0o644)
		}
	}
	return errors.New("no freezer: neither a cgroup v2 hierarchy nor the v1 freezer is mounted")
}

// killCgroup kills every process in path and below and waits until they
// are gone (reaped by their parents, or by init). Frozen first, so nothing
// forks or speaks while the killing goes on; killed processes, VRRP's
// included, send nothing on their way out.
func killCgroup(path string, timeout time.Duration) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(hs[0], path)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		pids, err := cgroupPIDs(path)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v still there after %s", path, pids, timeout)
		}
		_ = freezeCgroup(path, true)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		// A frozen process dies of SIGKILL only once thawed.
		_ = freezeCgroup(path, false)
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroup kills what is left in path and removes it, and every cgroup
// below it, from every hierarchy. A path that is not there is fine.
func removeCgroup(path string) error {
	if err := killCgroup(path, 30*time.Second); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		dirs := subtree(filepath.Join(h, path))
		// Deepest first.
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// subtree lists the directory root and every directory below it, each
// before those below it; none when root is not there.
func subtree(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs
}

// rmdirRetry removes a cgroup, waiting a little for a dying process to
// leave it (EBUSY).
func rmdirRetry(dir string) error {
	var err error
	for range 100 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

// cgroupRSS sums the resident memory of the processes in path and below.
func cgroupRSS(path string) (int64, error) {
	return cgroupRSSOf(path, "")
}

// cgroupRSSOf is cgroupRSS of the processes whose name (comm) is comm
// ("": all).
func cgroupRSSOf(path, comm string) (int64, error) {
	pids, err := cgroupPIDs(path)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, pid := range pids {
		if comm != "" {
			name, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil || strings.TrimSpace(string(name)) != comm {
				continue
			}
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb * 1024
			}
		}
	}
	return total, nil
}

// limitCores confines every process in path and below to the last cores
// of the CPUs its parent cgroup may use (cpuset.cpus of the cpuset
// controller), n of them; 0 gives them all back. Unlike a CFS quota, which
// stops the whole group once it has used its time in a period, the
// group's processes keep their usual scheduling on those cores: a machine
// with fewer cores. In cgroup v1 a child's CPUs must be within its
// parent's, so a cgroup and those below it shrink deepest first and grow
// from the top (retried when the kubelet adds a cgroup meanwhile); in v2
// the machine's own cpuset.cpus bounds what is below it.
func limitCores(path string, n int) error {
	if n < 0 {
		return fmt.Errorf("a limit of %d cores: must be 0 (none) or more", n)
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	parentCPUs := func(h string) (string, error) {
		b, err := os.ReadFile(filepath.Join(h, filepath.Dir(path), "cpuset.cpus"))
		if err != nil {
			return "", err
		}
		all := strings.TrimSpace(string(b))
		if n == 0 {
			return all, nil
		}
		cpus, err := parseCPUList(all)
		if err != nil {
			return "", fmt.Errorf("%s/cpuset.cpus: %w", filepath.Dir(path), err)
		}
		if n > len(cpus) {
			return "", fmt.Errorf("a limit of %d cores: %s has %d (%s)", n, filepath.Dir(path), len(cpus), all)
		}
		var out []string
		for _, c := range cpus[len(cpus)-n:] {
			out = append(out, strconv.Itoa(c))
		}
		return strings.Join(out, ","), nil
	}
	if u := unified(hs); u != "" {
		if _, err := os.Stat(filepath.Join(u, path, "cpuset.cpus")); err == nil {
			v := ""
			if n > 0 {
				if v, err = parentCPUs(u); err != nil {
					return err
				}
			}
			return os.WriteFile(filepath.Join(u, path, "cpuset.cpus"), []byte(v), 0o644)
		}
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, path, "cpuset.cpus")); err != nil {
			continue
		}
		v, err := parentCPUs(h)
		if err != nil {
			return err
		}
		for try := 0; ; try++ {
			dirs := subtree(filepath.Join(h, path))
			if n > 0 {
				slices.Reverse(dirs) // deepest first
			}
			err = nil
			for _, d := range dirs {
				if werr := os.WriteFile(filepath.Join(d, "cpuset.cpus"), []byte(v), 0o644); werr != nil && !errors.Is(werr, fs.ErrNotExist) {
					err = fmt.Errorf("%s/cpuset.cpus = %s: %w", d, v, werr)
					break
				}
			}
			if err == nil || try == 4 {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return errors.New("no cpuset controller: no cpuset.cpus in the cgroup hierarchies")
}

// parseCPUList reads a kernel CPU list such as 0-3,6.
func parseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CPU list %q: no CPU", s)
	}
	return out, nil
}
