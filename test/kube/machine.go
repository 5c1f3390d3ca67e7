package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// Machine is a running machine of the cluster: the control plane or a
// node. Each has its network namespace (a lab node or host), a mount and
// UTS namespace of its own (its hostname; /run, /var/lib and /var/log are
// its own directories under the cluster's, so every default path of the
// daemons is per machine), a cgroup, and its daemons.
type Machine struct {
	Host
	c   *Cluster
	lab *lab.Node
	// daemons are the machine's programs in start order.
	daemons []Daemon
}

// Daemon names one long-running program of a machine.
type Daemon string

// The daemons of the control plane and of a node.
const (
	Etcd              Daemon = "etcd"
	APIServer         Daemon = "kube-apiserver"
	ControllerManager Daemon = "kube-controller-manager"
	Scheduler         Daemon = "kube-scheduler"
	Containerd        Daemon = "containerd"
	Kubelet           Daemon = "kubelet"
	KubeProxy         Daemon = "kube-proxy"
)

// The daemons of each kind of machine, in start order.
var (
	controlPlaneDaemons = []Daemon{Etcd, APIServer, ControllerManager, Scheduler}
	nodeDaemons         = []Daemon{Containerd, Kubelet, KubeProxy}
)

// Lab returns the machine's lab node: Exec, Dial, Addrs, BlockVRRP...
func (m *Machine) Lab() *lab.Node { return m.lab }

// Dir is the machine's directory: etc (its configuration), run, var-lib
// and var-log (its /run, /var/lib and /var/log), logs (one file per
// daemon), pids.
func (m *Machine) Dir() string { return filepath.Join(m.c.st.Dir, m.Name) }

// PodLogs is where the host sees the machine's /var/log/pods: the
// kubelet's container logs, <namespace>_<pod>_<uid>/<container>/<n>.log,
// deleted with their pod.
func (m *Machine) PodLogs() string { return filepath.Join(m.Dir(), "var-log", "pods") }

// Log is the path of a daemon's log (stdout and stderr).
func (m *Machine) Log(d Daemon) string { return filepath.Join(m.Dir(), "logs", string(d)+".log") }

func (m *Machine) etc(file string) string { return filepath.Join(m.Dir(), "etc", file) }

func (m *Machine) pidFile(d Daemon) string {
	return filepath.Join(m.Dir(), "pids", string(d)+".pid")
}

// cgroup is the machine's cgroup path (in every hierarchy).
func (m *Machine) cgroup() string { return m.c.st.Cgroup + "/" + m.Name }

// mountNS and utsNS are the files that keep the machine's namespaces.
func (m *Machine) mountNS() string { return filepath.Join(m.c.st.Dir, "ns", m.Name+".mnt") }
func (m *Machine) utsNS() string   { return filepath.Join(m.c.st.Dir, "ns", m.Name+".uts") }

// machineDirs are the machine's directories bound over the host's in its
// mount namespace: /run, /var/lib, /var/log.
var machineDirs = []struct{ dir, mount string }{
	{"run", "/run"},
	{"var-lib", "/var/lib"},
	{"var-log", "/var/log"},
}

// boot makes the machine's mount and UTS namespaces, bound to files under
// the cluster's ns directory so they outlive every process: its hostname,
// its /run, /var/lib and /var/log, and /etc/hosts naming it. The
// namespace is a copy of the host's at this moment, with every mount
// private: nothing mounted inside reaches the host.
func (m *Machine) boot(ctx context.Context) error {
	if err := m.makeDirs(); err != nil {
		return err
	}
	for _, f := range []string{m.mountNS(), m.utsNS()} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			return err
		}
	}
	hosts := fmt.Sprintf("127.0.0.1 localhost\n::1 localhost\n%s %s\n%s %s\n", m.Addr4, m.Name, m.Addr6, m.Name)
	if err := os.WriteFile(m.etc("hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	script := `set -e
hostname "$1"
shift
while [ $# -gt 1 ]; do mount --bind "$1" "$2"; shift 2; done`
	argv := []string{"nsenter", "--net=/run/netns/" + m.Netns, "--",
		"unshare", "--mount=" + m.mountNS(), "--uts=" + m.utsNS(), "--propagation", "private", "--",
		"sh", "-c", script, "sh", m.Name}
	for _, d := range machineDirs {
		argv = append(argv, filepath.Join(m.Dir(), d.dir), d.mount)
	}
	argv = append(argv, m.etc("hosts"), "/etc/hosts")
	if _, err := run(ctx, argv); err != nil {
		return fmt.Errorf("%s: making its namespaces: %w", m.Name, err)
	}
	return nil
}

// makeDirs makes the machine's directories.
func (m *Machine) makeDirs() error {
	for _, d := range []string{"etc", "logs", "pids", "run", "var-lib", "var-log"} {
		if err := os.MkdirAll(filepath.Join(m.Dir(), d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// unmountNamespaces releases the machine's mount and UTS namespaces: once
// no process is left in them, the kernel frees them and every mount made
// inside (container root filesystems, emptyDirs).
func (m *Machine) unmountNamespaces() error {
	var errs []error
	for _, f := range []string{m.mountNS(), m.utsNS()} {
		if err := syscall.Unmount(f, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// Start starts the named daemons (all of the machine's when none are
// named), in the machine's namespaces and cgroup, detached: they outlive
// the calling process. A daemon already running is left alone.
func (m *Machine) Start(ctx context.Context, daemons ...Daemon) error {
	if len(daemons) == 0 {
		daemons = m.daemons
	}
	for _, d := range daemons {
		if _, ok := m.Running(d); ok {
			continue
		}
		cmd, err := m.command(d)
		if err != nil {
			return err
		}
		if err := m.c.detach(ctx, daemonProcess{m.cgroup(), m.pidFile(d), m.Log(d), m.enter(cmd)}); err != nil {
			return fmt.Errorf("%s: starting %s: %w", m.Name, d, err)
		}
		m.c.log.Info("started", "machine", m.Name, "daemon", d)
		// The kubelet gives up on a runtime that does not answer yet.
		if d == Containerd {
			if err := m.c.waitContainerd(ctx, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// StartProgram starts argv on the machine as a host program of its own
// called name, as a unit of the machine's init would: in the machine's
// namespaces and cgroup, detached, its output in Log(Daemon(name)). It
// shares the daemons' fate: Freeze stops it, Die and Boot kill it, and
// Kill(ctx, Daemon(name)) ends it; Running(Daemon(name)) finds it.
func (m *Machine) StartProgram(ctx context.Context, name string, argv []string) error {
	d := Daemon(name)
	if _, ok := m.Running(d); ok {
		return fmt.Errorf("%s: %s runs already", m.Name, name)
	}
	if err := m.c.detach(ctx, daemonProcess{m.cgroup(), m.pidFile(d), m.Log(d), m.enter(argv)}); err != nil {
		return fmt.Errorf("%s: starting %s: %w", m.Name, name, err)
	}
	m.c.log.Info("started", "machine", m.Name, "program", name)
	return nil
}

// enter prefixes argv with the nsenter that puts it in the machine's
// network, mount and UTS namespaces.
func (m *Machine) enter(cmd []string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + m.Netns, "--mount=" + m.mountNS(), "--uts=" + m.utsNS(), "--"}, cmd...)
}

// Exec runs a one-off command on the machine as its daemons see it (its
// network, mounts and hostname) and returns its combined output.
func (m *Machine) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	out, err := run(ctx, append([]string{"nsenter", "--net=/run/netns/" + m.Netns, "--mount=" + m.mountNS(), "--uts=" + m.utsNS(), "--"}, argv...))
	if err != nil {
		return out, fmt.Errorf("%s: %w", m.Name, err)
	}
	return out, nil
}

// run runs a command and returns its combined output; an error quotes it.
func run(ctx context.Context, argv []string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Running returns the PID of a daemon that runs.
func (m *Machine) Running(d Daemon) (int, bool) {
	return m.c.running(m.cgroup(), m.pidFile(d))
}

// Kill sends SIGKILL to the named daemons (all when none are named) and
// waits until they are gone. What they started (a kubelet's containers, a
// containerd's shims) stays.
func (m *Machine) Kill(ctx context.Context, daemons ...Daemon) error {
	return m.signal(ctx, syscall.SIGKILL, daemons)
}

// Stop sends SIGTERM to the named daemons (all when none are named), in
// reverse start order, and waits until each is gone; SIGKILL after
// stopGrace (a kube-apiserver draining its watches may take longer).
func (m *Machine) Stop(ctx context.Context, daemons ...Daemon) error {
	return m.signal(ctx, syscall.SIGTERM, daemons)
}

func (m *Machine) signal(ctx context.Context, sig syscall.Signal, daemons []Daemon) error {
	if len(daemons) == 0 {
		for i := len(m.daemons) - 1; i >= 0; i-- {
			daemons = append(daemons, m.daemons[i])
		}
	}
	for _, d := range daemons {
		pid, ok := m.Running(d)
		if !ok {
			continue
		}
		if err := stopPID(ctx, pid, sig, stopGrace); err != nil {
			return fmt.Errorf("%s: stopping %s: %w", m.Name, d, err)
		}
		m.c.log.Info("stopped", "machine", m.Name, "daemon", d, "signal", sig)
	}
	return nil
}

// stopGrace is how long Stop waits for a daemon to exit on SIGTERM.
const stopGrace = 10 * time.Second

// Die is a machine's sudden death: every process of the machine (daemons,
// shims, containers) frozen and killed at once, so none sends a goodbye,
// then its link cut. Its addresses stay on eth0, as a machine that hangs
// leaves them; Boot brings it back as a reboot would.
func (m *Machine) Die(ctx context.Context) error {
	if err := killCgroup(m.cgroup(), time.Minute); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	if err := m.lab.LinkDown(); err != nil {
		return err
	}
	m.c.log.Info("died", "machine", m.Name)
	return nil
}

// Boot is a reboot: whatever runs is killed, the machine's runtime state
// goes (new mount namespace, an empty /run, only its own addresses on
// eth0, no firewall rules, no pod interfaces), the link comes up, and the
// daemons start. /var/lib stays, as a disk does.
func (m *Machine) Boot(ctx context.Context) error {
	if err := killCgroup(m.cgroup(), time.Minute); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	if err := m.unmountNamespaces(); err != nil {
		return err
	}
	if err := clearDir(filepath.Join(m.Dir(), "run")); err != nil {
		return err
	}
	if err := m.resetNetwork(ctx); err != nil {
		return err
	}
	if err := m.boot(ctx); err != nil {
		return err
	}
	if err := m.RestoreLink(ctx); err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	m.c.log.Info("booted", "machine", m.Name)
	return nil
}

// resetNetwork returns the network namespace to what the machine had at
// first boot: eth0 with its own addresses, no other interface but lo, no
// firewall rules.
func (m *Machine) resetNetwork(ctx context.Context) error {
	out, err := m.lab.Exec(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if name == "lo" || name == lab.Link {
			continue
		}
		if _, err := m.lab.Exec(ctx, "ip", "link", "del", name); err != nil {
			m.c.log.Debug("reset: link already gone", "machine", m.Name, "link", name, "error", err)
		}
	}
	addrs, err := m.lab.Addrs()
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if a.Addr() == m.Addr4 || a.Addr() == m.Addr6 {
			continue
		}
		if _, err := m.lab.Exec(ctx, "ip", "addr", "del", a.String(), "dev", lab.Link); err != nil {
			return err
		}
	}
	_, err = m.lab.Exec(ctx, "nft", "flush", "ruleset")
	return err
}

// Freeze stops every process of the machine where it stands (cgroup
// freezer): a machine that hangs. Its network stays up: the kernel still
// answers ARP and refuses connections. Thaw lets it go on.
func (m *Machine) Freeze() error { return freezeCgroup(m.cgroup(), true) }

// Thaw undoes Freeze.
func (m *Machine) Thaw() error { return freezeCgroup(m.cgroup(), false) }

// LimitCores confines the machine's processes, its daemons and pods
// together, to n of this computer's cores (the last ones), as if the
// machine had n cores: what its own saturation then takes is its own, not
// the other machines' and the harness's, which share the cores. 0 gives
// it every core again.
func (m *Machine) LimitCores(n int) error { return limitCores(m.cgroup(), n) }

// CutLink takes the machine off the network (eth0 down), its processes
// running on. RestoreLink undoes it.
func (m *Machine) CutLink() error { return m.lab.LinkDown() }

// RestoreLink brings eth0 up again with its routes: the default route and,
// on a node, the routes to the other nodes' pods.
func (m *Machine) RestoreLink(ctx context.Context) error {
	if err := m.lab.Rejoin(ctx); err != nil {
		return err
	}
	return m.podRoutes(ctx)
}

// podRoutes routes every other node's share of PodCIDR through that node.
func (m *Machine) podRoutes(ctx context.Context) error {
	if !m.PodCIDR.IsValid() {
		return nil
	}
	for _, o := range m.c.Nodes {
		if o == m {
			continue
		}
		if _, err := m.lab.Exec(ctx, "ip", "route", "replace", o.PodCIDR.String(), "via", o.Addr4.String(), "dev", lab.Link); err != nil {
			return err
		}
	}
	return nil
}

// RSS is the resident memory of every process of the machine.
func (m *Machine) RSS() (int64, error) { return cgroupRSS(m.cgroup()) }

// ProgramRSS is the resident memory of the machine's processes named
// comm (a pod's entrypoint: "ipfailover").
func (m *Machine) ProgramRSS(comm string) (int64, error) { return cgroupRSSOf(m.cgroup(), comm) }

// clearDir removes what is in dir, keeping dir.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// stopPID signals pid and waits until it has exited; SIGKILL after grace.
func stopPID(ctx context.Context, pid int, sig syscall.Signal, grace time.Duration) error {
	if err := syscall.Kill(pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
	deadline := time.Now().Add(grace)
	for alive(pid) {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				return fmt.Errorf("pid %d still there %s after SIGKILL", pid, grace)
			}
			return stopPID(ctx, pid, syscall.SIGKILL, grace)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// alive reports whether pid runs (a zombie has exited).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
