package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// cpuSample is one node's CPU use over a window, in percent of one CPU:
// the entrypoint, and keepalived with every process it ran (check
// scripts); and the same split of its resident memory at the end of the
// window, with the sum of each process's peak (VmHWM), in bytes: what a
// pod running them asks for.
type cpuSample struct {
	entrypoint, keepalived       float64
	entrypointRSS, keepalivedRSS int64
	peakRSS                      int64
}

// cpuGroup is a cgroup v2 group the bench moves processes into to read
// their CPU time: cpu.stat's usage_usec counts every process that ran in
// it, the short-lived ones (check scripts) included, to the microsecond.
type cpuGroup struct {
	dir string
}

// newCPUGroup makes a group called name under the cgroup v2 root.
func newCPUGroup(name string) (*cpuGroup, error) {
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making cgroup %s: %w", dir, err)
	}
	return &cpuGroup{dir: dir}, nil
}

// cgroup2Root finds where cgroup v2 is mounted: /sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid host.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup v2 mount: the CPU rows need one")
}

// add moves the process pid, all its threads, into the group.
func (g *cpuGroup) add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("moving %d into %s: %w", pid, g.dir, err)
	}
	return nil
}

// usage is the CPU time the group's processes used since they joined.
func (g *cpuGroup) usage() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat has no usage_usec", g.dir)
}

// remove deletes the group once its processes are gone.
func (g *cpuGroup) remove() error {
	var err error
	for range 50 {
		if err = os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// cpuCase is one CPU row: a fleet's VIPs and check.
type cpuCase struct {
	row   string
	vips  string
	scale bool
	env   []string
}

// CPU rows.
const (
	rowCPU1       = "CPU per node at rest, 1 VIP"
	rowCPU254     = "CPU per node at rest, 254 VIPs"
	builtinSuffix = ": built-in check"
	scriptSuffix  = ": keepalived script check every 2 s"
)

// cpuAtRest measures, for 1 and 254 VIPs, with the built-in check and with
// the shipped image's script check, what a node of a settled fleet uses.
func (r *runner) cpuAtRest(ctx context.Context) error {
	var cases []cpuCase
	for _, size := range []struct {
		row, vips string
		scale     bool
		env       []string
	}{
		{rowCPU1, "198.51.100.1", false, []string{"OPENSHIFT_HA_VIRTUAL_IPS=198.51.100.1"}},
		{rowCPU254, scaleVIPs, true, ScaleEnv()},
	} {
		cases = append(cases,
			cpuCase{size.row + builtinSuffix, size.vips, size.scale, Env(size.env...)},
			cpuCase{size.row + scriptSuffix, size.vips, size.scale, Env(append(size.env, r.scriptCheck()...)...)})
	}
	for _, c := range cases {
		if c.scale && !r.o.Scale {
			continue
		}
		if err := r.cpuCase(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", c.row, err)
		}
	}
	return nil
}

func (r *runner) cpuCase(ctx context.Context, c cpuCase) error {
	vips := VIPs(c.vips)
	f, err := r.start(ctx, c.env, vips, "")
	if err != nil {
		return err
	}
	// Let the start settle: backups hear their first adverts.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	type groups struct{ entrypoint, keepalived *cpuGroup }
	var gs []groups
	defer func() {
		r.stop(f)
		for _, g := range gs {
			for _, cg := range []*cpuGroup{g.entrypoint, g.keepalived} {
				if err := cg.remove(); err != nil {
					r.note("removing %s: %v", cg.dir, err)
				}
			}
		}
	}()
	for _, p := range f.procs {
		g, err := r.nodeGroups(p)
		if g[0] != nil {
			gs = append(gs, groups{g[0], g[1]})
		}
		if err != nil {
			return err
		}
	}
	before := make([][2]time.Duration, len(gs))
	for i, g := range gs {
		if before[i], err = usages(g.entrypoint, g.keepalived); err != nil {
			return err
		}
	}
	began := time.Now()
	if err := sleep(ctx, r.o.CPUFor); err != nil {
		return err
	}
	took := time.Since(began)
	for i, g := range gs {
		after, err := usages(g.entrypoint, g.keepalived)
		if err != nil {
			return err
		}
		s := cpuSample{
			entrypoint: 100 * (after[0] - before[i][0]).Seconds() / took.Seconds(),
			keepalived: 100 * (after[1] - before[i][1]).Seconds() / took.Seconds(),
		}
		if err := r.nodeMemory(f.procs[i], &s); err != nil {
			return err
		}
		r.mu.Lock()
		r.cpu[c.row] = append(r.cpu[c.row], s)
		r.mu.Unlock()
		r.o.Log.Info("cpu at rest", "row", c.row, "node", f.procs[i].Node().Name, "entrypoint_pct", fmt.Sprintf("%.3f", s.entrypoint), "keepalived_pct", fmt.Sprintf("%.3f", s.keepalived), "window", took.Round(time.Millisecond))
	}
	return nil
}

// nodeMemory reads the resident memory of every live process of the
// node into s (a check script that exits meanwhile is skipped) and logs
// each, so that keepalived's parent, VRRP and checker children show apart.
func (r *runner) nodeMemory(p *lab.Process, s *cpuSample) error {
	procs, err := p.Procs()
	if err != nil {
		return err
	}
	for _, q := range procs {
		m, err := Memory(q.Pid)
		if err != nil {
			continue
		}
		if q.Pid == p.Pid {
			s.entrypointRSS += m["VmRSS"]
		} else {
			s.keepalivedRSS += m["VmRSS"]
		}
		s.peakRSS += m["VmHWM"]
		r.o.Log.Info("memory at rest", "node", p.Node().Name, "pid", q.Pid, "ppid", q.PPid, "comm", q.Comm,
			"rss_kb", m["VmRSS"]>>10, "anon_kb", m["RssAnon"]>>10, "file_kb", m["RssFile"]>>10, "hwm_kb", m["VmHWM"]>>10)
	}
	return nil
}

// nodeGroups moves the entrypoint of a node into one group and every other
// process of the node (keepalived, its children) into another. The groups
// it returns, also with an error, are the caller's to remove.
func (r *runner) nodeGroups(p *lab.Process) ([2]*cpuGroup, error) {
	var g [2]*cpuGroup
	procs, err := p.Procs()
	if err != nil {
		return g, err
	}
	name := fmt.Sprintf("ipfailover-bench-%s-%s", r.c.Name, p.Node().Name)
	for i, part := range []string{"entrypoint", "keepalived"} {
		if g[i], err = newCPUGroup(name + "-" + part); err != nil {
			if i == 1 {
				_ = g[0].remove()
			}
			return [2]*cpuGroup{}, err
		}
	}
	for _, q := range procs {
		to := g[1]
		if q.Pid == p.Pid {
			to = g[0]
		}
		// A child that exits between the listing and the move (a check
		// script, an iptables run) has nothing left to count.
		err := to.add(q.Pid)
		gone := q.Pid != p.Pid && errors.Is(err, syscall.ESRCH)
		if err != nil && !gone {
			return g, err
		}
	}
	return g, nil
}

func usages(gs ...*cpuGroup) ([2]time.Duration, error) {
	var out [2]time.Duration
	for i, g := range gs {
		u, err := g.usage()
		if err != nil {
			return out, err
		}
		out[i] = u
	}
	return out, nil
}
