package lab

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

// A CPUGroup is a cgroup of the cpu controller with the CPU share a
// Kubernetes container of a given CPU request gets: in the cgroup v2
// hierarchy where the cpu controller is there, else in the v1 hierarchy
// that has it. Under contention its processes get CPU time in proportion
// to the shares of its runnable siblings, as a pod's do on a node; the
// nodes' processes are started outside any (Start), and a harness moves
// them in (Add).
type CPUGroup struct {
	// Path is the cgroup's path below the hierarchy's root.
	Path string
	dir  string
	v2   bool
}

// cpuHierarchy returns the mount point of the hierarchy that has the cpu
// controller and whether it is cgroup v2.
func cpuHierarchy() (string, bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	var v1, v2 string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup2" && v2 == "":
			if c, err := os.ReadFile(filepath.Join(f[4], "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(c)), "cpu") {
				v2 = f[4]
			}
		case g[0] == "cgroup" && v1 == "" && slices.Contains(strings.Split(g[2], ","), "cpu"):
			v1 = f[4]
		}
	}
	if v2 != "" {
		return v2, true, nil
	}
	if v1 != "" {
		return v1, false, nil
	}
	return "", false, errors.New("no cgroup hierarchy with the cpu controller is mounted")
}

// CPUShares is the cgroup v1 cpu.shares of a CPU request of milli
// millicores, as the kubelet computes it.
func CPUShares(milli int) int { return max(2, milli*1024/1000) }

// CPUWeight is the cgroup v2 cpu.weight of a CPU request of milli
// millicores: the kubelet's conversion of its shares (100m: 4).
func CPUWeight(milli int) int { return 1 + (CPUShares(milli)-2)*9999/262142 }

// NewCPUGroup creates the cgroup path (its parents too, with the
// hierarchy's default share) with the share of a request of milli
// millicores. In cgroup v2 the cpu controller is enabled on the way down,
// so the parents hold no process of their own.
func NewCPUGroup(path string, milli int) (*CPUGroup, error) {
	root, v2, err := cpuHierarchy()
	if err != nil {
		return nil, err
	}
	dir := root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		if v2 {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
				return nil, fmt.Errorf("enabling the cpu controller below %s: %w", dir, err)
			}
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
	}
	g := &CPUGroup{Path: path, dir: dir, v2: v2}
	file, value := "cpu.shares", CPUShares(milli)
	if v2 {
		file, value = "cpu.weight", CPUWeight(milli)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(value)), 0o644); err != nil {
		return nil, fmt.Errorf("cgroup %s: %s: %w", dir, file, err)
	}
	return g, nil
}

// Add moves the process pid, every thread of it, into the group; what it
// forks from then on is born there.
func (g *CPUGroup) Add(pid int) error {
	err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("moving pid %d into cgroup %s: %w", pid, g.dir, err)
	}
	return nil
}

// Has reports whether pid is in the group.
func (g *CPUGroup) Has(pid int) (bool, error) {
	data, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		return false, err
	}
	return slices.Contains(strings.Fields(string(data)), strconv.Itoa(pid)), nil
}

// RemoveCPUGroup removes the cgroup path and every cgroup below it,
// deepest first, waiting a little for processes that are dying to leave.
// A path that is not there is fine.
func RemoveCPUGroup(path string) error {
	root, _, err := cpuHierarchy()
	if err != nil {
		return err
	}
	var dirs []string
	_ = filepath.WalkDir(filepath.Join(root, strings.Trim(path, "/")), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for range 100 {
			if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// CPUGroupOf returns the group of the cpu controller's hierarchy that the
// process pid is in now (the hierarchy's root at the least).
func CPUGroupOf(pid int) (*CPUGroup, error) {
	root, v2, err := cpuHierarchy()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// ID:CONTROLLERS:PATH; the v2 hierarchy's has no controllers.
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || (v2 && f[1] != "") || (!v2 && !slices.Contains(strings.Split(f[1], ","), "cpu")) {
			continue
		}
		path := strings.Trim(f[2], "/")
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			// A container without a cgroup namespace of its own lists
			// its group by the host's path, which its mount of the
			// hierarchy does not have: its mount's root is its group.
			path = ""
		}
		return &CPUGroup{Path: path, dir: filepath.Join(root, path), v2: v2}, nil
	}
	return nil, fmt.Errorf("pid %d is in no group of the cpu controller", pid)
}
