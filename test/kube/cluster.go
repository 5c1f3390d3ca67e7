package kube

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// Options shape Up.
type Options struct {
	// Dir is the cluster's directory (DefaultDir when empty); it must not
	// hold a cluster already.
	Dir string
	// Bin holds kube-apiserver, kube-controller-manager, kube-scheduler,
	// kubelet, kube-proxy, kubectl, etcd and pause (make kube-bins).
	Bin string
	// Images are podman image references imported into every node's
	// containerd (the pods use them with imagePullPolicy: Never).
	Images []string
	// Forwarder, when set, is the command that serves the API server on
	// the host's loopback (Forward); Up appends its arguments. Without it
	// the cluster is reached from the lab's client namespace only (Kubectl
	// does that either way).
	Forwarder []string
	// Service, when set with ServicePort, is the command that serves on
	// every node what the VIPs lead to (startServices): the quick start's
	// service. Up appends its arguments.
	Service     []string
	ServicePort int
	// Logger receives one line per step; nil discards.
	Logger *slog.Logger
}

// Cluster is a running cluster: from Up, or from Attach in another
// process.
type Cluster struct {
	// ControlPlane is the control plane's machine.
	ControlPlane *Machine
	// Nodes are the Kubernetes nodes, node1 first.
	Nodes []*Machine

	st  *State
	lab *lab.Cluster
	log *slog.Logger
	// imports are how long each node took to import the images (Up).
	imports []time.Duration
}

// ImportTimes returns how long each node took to import the images, for a
// cluster from Up.
func (c *Cluster) ImportTimes() []time.Duration { return c.imports }

// labOptions is the lab every cluster is built on.
func labOptions(log *slog.Logger) lab.Options {
	return lab.Options{Nodes: 3, Hosts: []string{ControlPlane}, Routing: true, Logger: log}
}

// State returns where everything is.
func (c *Cluster) State() State { return *c.st }

// Lab returns the lab cluster underneath: its client namespace, probers,
// VIP holders.
func (c *Cluster) Lab() *lab.Cluster { return c.lab }

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Machine {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Close lets go of the cluster without stopping it: the namespaces and
// daemons stay, for Down.
func (c *Cluster) Close() error {
	if c.lab == nil {
		return nil
	}
	return c.lab.Close()
}

// Attach returns the running cluster whose state file is in dir.
func Attach(dir string, log *slog.Logger) (*Cluster, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := readState(filepath.Join(dir, StateName))
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s (make kube-up): %w", dir, err)
	}
	l, err := lab.Attach(st.Name, labOptions(log))
	if err != nil {
		return nil, err
	}
	return newCluster(st, l, log), nil
}

// newCluster is the cluster of a state; without a lab (Down) its machines
// know their files only.
func newCluster(st *State, l *lab.Cluster, log *slog.Logger) *Cluster {
	c := &Cluster{st: st, lab: l, log: log}
	c.ControlPlane = &Machine{Host: st.ControlPlane, c: c, daemons: controlPlaneDaemons}
	for _, h := range st.Nodes {
		c.Nodes = append(c.Nodes, &Machine{Host: h, c: c, daemons: nodeDaemons})
	}
	if l != nil {
		c.ControlPlane.lab = l.Host(ControlPlane)
		for i, n := range c.Nodes {
			n.lab = l.Nodes[i]
		}
	}
	return c
}

// Up builds and starts a cluster (see the package comment) and waits until
// every node is Ready. On error it removes what it made.
func Up(ctx context.Context, o Options) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("kube: a cluster needs root")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, bin, err := checkPaths(o)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	l, err := lab.New(ctx, labOptions(log))
	if err != nil {
		return nil, err
	}
	st := &State{
		Name:      l.Name,
		Dir:       dir,
		Bin:       bin,
		Cgroup:    "/ipfk-" + l.Name,
		LabServer: fmt.Sprintf("https://%s", netip.AddrPortFrom(l.Host(ControlPlane).Addr4, APIPort)),
		Created:   began,
	}
	host := func(n *lab.Node) Host { return Host{Name: n.Name, Netns: n.Netns, Addr4: n.Addr4, Addr6: n.Addr6} }
	st.ControlPlane = host(l.Host(ControlPlane))
	st.Client = host(l.Client)
	for i, n := range l.Nodes {
		h := host(n)
		h.PodCIDR = netip.PrefixFrom(podBase(i), 26)
		st.Nodes = append(st.Nodes, h)
	}
	// The directories made for the cluster's (out/ in a fresh clone), for
	// Down to remove too.
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		st.Parents = append(st.Parents, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	// From here on Down can undo everything: the state says where it is.
	if err := st.write(); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	c := newCluster(st, l, log.With("kube", l.Name))
	l.Keep()
	if err := c.up(ctx, o); err != nil {
		return nil, errors.Join(err, Down(context.WithoutCancel(ctx), dir, log))
	}
	c.log.Info("cluster up", "took", time.Since(began).Round(time.Millisecond), "kubeconfig", st.Kubeconfig)
	return c, nil
}

// podBase is node i's (0-based) share of PodCIDR: a /26 each.
func podBase(i int) netip.Addr {
	a := PodCIDR.Addr().As4()
	a[3] = byte(64 * i)
	return netip.AddrFrom4(a)
}

// checkPaths makes the directories absolute and checks them: a machine
// sees the host's files except its own /run, /var/lib and /var/log, so
// neither directory may be under those.
func checkPaths(o Options) (dir, bin string, err error) {
	dir = o.Dir
	if dir == "" {
		if dir, err = DefaultDir(); err != nil {
			return "", "", err
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", err
	}
	if bin, err = filepath.Abs(o.Bin); err != nil {
		return "", "", err
	}
	for _, p := range []string{dir, bin} {
		for _, d := range machineDirs {
			if p == d.mount || strings.HasPrefix(p, d.mount+"/") {
				return "", "", fmt.Errorf("kube: %s is under %s, which every machine replaces with its own", p, d.mount)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, StateName)); err == nil {
		return "", "", fmt.Errorf("kube: a cluster is up in %s already (make kube-down removes it)", dir)
	}
	var missing []string
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("kube: %s lacks %s (make kube-bins builds them)", bin, strings.Join(missing, ", "))
	}
	return dir, bin, nil
}

// binaries are what Options.Bin must hold.
var binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "etcd", "pause"}

func (c *Cluster) up(ctx context.Context, o Options) error {
	st := c.st
	if err := register(st.Name); err != nil {
		return err
	}
	ns := filepath.Join(st.Dir, "ns")
	if err := privateMount(ns); err != nil {
		return err
	}
	for _, m := range c.machines() {
		if err := m.makeDirs(); err != nil {
			return err
		}
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	for _, m := range c.machines() {
		if err := makeCgroup(m.cgroup()); err != nil {
			return err
		}
		if err := m.boot(ctx); err != nil {
			return err
		}
	}
	if err := makeCgroup(c.forwarderCgroup()); err != nil {
		return err
	}
	// podman saves the images while the control plane starts.
	type save struct {
		archives []string
		err      error
	}
	images := make(chan save, 1)
	go func() {
		a, err := c.saveImages(ctx, o.Images)
		images <- save{a, err}
	}()
	cp := c.ControlPlane
	if err := cp.Start(ctx, Etcd); err != nil {
		return err
	}
	if err := c.waitTCP(ctx, cp, "127.0.0.1:2379", Etcd); err != nil {
		return err
	}
	if err := cp.Start(ctx, APIServer); err != nil {
		return err
	}
	if err := c.WaitAPI(ctx); err != nil {
		return err
	}
	if err := cp.Start(ctx); err != nil {
		return err
	}
	if len(o.Forwarder) > 0 {
		if err := c.startForwarder(ctx, o.Forwarder); err != nil {
			return err
		}
	}
	saved := <-images
	if saved.err != nil {
		return saved.err
	}
	archives := saved.archives
	// The nodes boot side by side, as machines do; importing the images
	// is most of it.
	errs := make([]error, len(c.Nodes))
	c.imports = make([]time.Duration, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() {
			if errs[i] = n.podRoutes(ctx); errs[i] != nil {
				return
			}
			if errs[i] = n.Start(ctx, Containerd); errs[i] != nil {
				return
			}
			if c.imports[i], errs[i] = n.importImages(ctx, archives); errs[i] != nil {
				return
			}
			errs[i] = n.Start(ctx)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.WaitNodesReady(ctx); err != nil {
		return err
	}
	if err := c.waitDefaultServiceAccount(ctx); err != nil {
		return err
	}
	if len(o.Service) > 0 && o.ServicePort > 0 {
		if err := c.startServices(ctx, o.Service, o.ServicePort); err != nil {
			return err
		}
	}
	return st.write()
}

// machines lists the control plane and the nodes.
func (c *Cluster) machines() []*Machine { return append([]*Machine{c.ControlPlane}, c.Nodes...) }

// waitTCP waits until addr accepts connections on the machine.
func (c *Cluster) waitTCP(ctx context.Context, m *Machine, addr string, d Daemon) error {
	return poll(ctx, time.Minute, string(d)+" listening on "+addr, func() (bool, error) {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := m.lab.Dial(dctx, "tcp", addr)
		if err != nil {
			return false, c.exited(m, d)
		}
		conn.Close()
		return true, nil
	})
}

// exited is an error when a daemon is no longer running (its log's tail
// says why), nil while it runs.
func (c *Cluster) exited(m *Machine, d Daemon) error {
	if _, ok := m.Running(d); ok {
		return nil
	}
	return fmt.Errorf("%s: %s exited:\n%s", m.Name, d, tail(m.Log(d), 15))
}

// WaitAPI waits until the API server answers /readyz.
func (c *Cluster) WaitAPI(ctx context.Context) error {
	return poll(ctx, 2*time.Minute, "the API server ready", func() (bool, error) {
		out, err := c.Kubectl(ctx, "get", "--raw", "/readyz")
		if err == nil && strings.TrimSpace(string(out)) == "ok" {
			return true, nil
		}
		return false, c.exited(c.ControlPlane, APIServer)
	})
}

// waitDefaultServiceAccount waits until the controller manager has made
// the default namespace's service account: until then the API server
// refuses every pod there ("serviceaccount \"default\" not found"), which
// a test that starts right after Up would meet.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	return poll(ctx, 2*time.Minute, "the default namespace's service account", func() (bool, error) {
		if _, err := c.Kubectl(ctx, "-n", "default", "get", "serviceaccount", "default"); err == nil {
			return true, nil
		}
		return false, c.exited(c.ControlPlane, ControllerManager)
	})
}

// waitContainerd waits until the node's containerd answers.
func (c *Cluster) waitContainerd(ctx context.Context, n *Machine) error {
	return poll(ctx, time.Minute, n.Name+"'s containerd", func() (bool, error) {
		if _, err := n.Exec(ctx, "ctr", "--address", containerdSocket, "version"); err == nil {
			return true, nil
		}
		return false, c.exited(n, Containerd)
	})
}

// WaitNodesReady waits until every node is Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context) error {
	return poll(ctx, 3*time.Minute, "every node Ready", func() (bool, error) {
		nodes, err := c.NodeStatus(ctx)
		if err != nil {
			return false, nil
		}
		for _, n := range c.Nodes {
			if !nodes[n.Name] {
				return false, c.exited(n, Kubelet)
			}
		}
		return true, nil
	})
}

// poll calls cond until it is true, returns an error, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// daemonProcess is a program of the cluster that runs detached.
type daemonProcess struct {
	// cgroup is joined before the program starts.
	cgroup string
	// pidFile receives its PID, logFile its output.
	pidFile, logFile string
	// argv is the command.
	argv []string
}

// detach starts p in its cgroup, detached from the calling process (its
// own session, no parent-death signal): it runs on when this process
// exits.
func (c *Cluster) detach(ctx context.Context, p daemonProcess) error {
	procs, err := procsFiles(p.cgroup)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	// The shell joins the cgroup, then becomes the command: its children
	// start in the cgroup too.
	cmd := exec.Command("sh", append([]string{"-c", `for f in $CGROUP_PROCS; do echo $$ >"$f"; done; exec "$@"`, "sh"}, p.argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "CGROUP_PROCS=" + strings.Join(procs, " ")}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(p.pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	// Once the shell has joined the cgroup, the process is the daemon's
	// for running() and Down, whatever happens next.
	err = poll(ctx, 10*time.Second, fmt.Sprintf("pid %d to join cgroup %s", pid, p.cgroup), func() (bool, error) {
		if _, ok := c.running(p.cgroup, p.pidFile); ok {
			return true, nil
		}
		if !alive(pid) {
			return false, fmt.Errorf("%s exited at once:\n%s", p.argv[0], tail(p.logFile, 15))
		}
		return false, nil
	})
	if err != nil {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		return err
	}
	// Reaped by init once it exits; this process forgets it.
	return cmd.Process.Release()
}

// running returns the PID in pidFile when that process is alive and in
// cgroup (not some later process that got the same PID).
func (c *Cluster) running(cgroup, pidFile string) (int, bool) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || !alive(pid) {
		return 0, false
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(cg), "\n") {
		// ID:CONTROLLERS:PATH
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[2] == cgroup || strings.HasPrefix(f[2], cgroup+"/")) {
			return pid, true
		}
	}
	return 0, false
}

// privateMount makes dir a mount point of its own with private
// propagation, where namespace files can be bound (as ip netns does with
// /run/netns).
func privateMount(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making %s private: %w", dir, err)
	}
	return nil
}

// Down removes the cluster whose state is in dir: every process (by
// cgroup, so nothing forked escapes), the machines' namespaces and every
// mount in them, the network namespaces, the cgroups, the directory, and
// the host registration; the last cluster of the host restores the sysctls
// the kubelets changed. No cluster in dir is not an error: Down is safe to
// run twice.
func Down(ctx context.Context, dir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := readState(filepath.Join(dir, StateName))
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("no cluster", "dir", dir)
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	if err := removeCgroup(st.Cgroup); err != nil {
		errs = append(errs, err)
	}
	c := newCluster(st, nil, log)
	for _, m := range c.machines() {
		if err := m.unmountNamespaces(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountUnder(st.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := lab.Remove(st.Name, labOptions(log)); err != nil {
		errs = append(errs, err)
	}
	if err := unregister(st.Name); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Keep the directory (and the state) for a second try.
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(st.Dir); err != nil {
		return err
	}
	for _, d := range st.Parents {
		// Only while empty: something else may have put files there since.
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) {
			return err
		}
	}
	log.Info("cluster removed", "name", st.Name, "dir", st.Dir)
	return nil
}

// unmountUnder unmounts every mount point at or below dir, deepest first,
// and fails when one stays: RemoveAll must never reach into a mount.
func unmountUnder(dir string) error {
	points, err := mountPoints()
	if err != nil {
		return err
	}
	var under []string
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			under = append(under, p)
		}
	}
	slices.SortFunc(under, func(a, b string) int { return len(b) - len(a) })
	for _, p := range under {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

// mountPoints lists the host's mount points (the calling process's mount
// namespace).
func mountPoints() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 4 {
			out = append(out, unescapeMount(f[4]))
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerdSocket is where every node's containerd listens, inside the
// node's own /run.
const containerdSocket = "/run/containerd/containerd.sock"
