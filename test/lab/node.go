package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Link is the name of the node's interface on the bridge.
const Link = "eth0"

// defaultPath is the PATH a started command gets unless env sets one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// containerInit runs as PID 1 of a new PID and mount namespace, after
// nsenter moved it into the node's network namespace: it makes every mount
// private (nothing propagates back to the host), mounts a /proc of the new
// PID namespace, a /sys of the node's network namespace and private tmpfs on
// the directories keepalived and the entrypoint write to, then execs the
// command, which therefore keeps PID 1.
const containerInit = `set -e
mount --make-rprivate /
mount -t proc proc /proc
umount -l /sys 2>/dev/null || true
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /etc/keepalived
exec "$@"`

// Node is one network namespace on the bridge.
type Node struct {
	// Name is "node1"..., or "client".
	Name string
	// Netns is the name of the network namespace (under /run/netns).
	Netns string
	// Addr4 and Addr6 are the node's own addresses on eth0.
	Addr4, Addr6 netip.Addr

	cluster *Cluster
	// port is the bridge's end of the node's veth.
	port string

	mu     sync.Mutex
	procs  []*Process
	handle *netlink.Handle
}

func (n *Node) routeSteps() [][]string {
	return [][]string{
		{"ip", "-n", n.Netns, "route", "replace", "default", "via", Gateway4.String(), "dev", Link},
		{"ip", "-n", n.Netns, "-6", "route", "replace", "default", "via", Gateway6.String(), "dev", Link},
	}
}

func (n *Node) openHandle() error {
	ns, err := netns.GetFromName(n.Netns)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", n.Netns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", n.Netns, err)
	}
	n.mu.Lock()
	n.handle = h
	n.mu.Unlock()
	return nil
}

func (n *Node) closeHandle() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handle != nil {
		n.handle.Close()
		n.handle = nil
	}
}

func (n *Node) netlink() (*netlink.Handle, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handle == nil {
		return nil, fmt.Errorf("%s: cluster closed", n.Name)
	}
	return n.handle, nil
}

// eth0 returns the node's netlink handle and its eth0.
func (n *Node) eth0() (*netlink.Handle, netlink.Link, error) {
	h, err := n.netlink()
	if err != nil {
		return nil, nil, err
	}
	link, err := h.LinkByName(Link)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", n.Name, err)
	}
	return h, link, nil
}

// Start runs argv in the node like a container: in the node's network
// namespace, as PID 1 of a new PID namespace, in a new mount namespace with
// private tmpfs on /run, /tmp and /etc/keepalived. env is the whole
// environment (PATH is added when missing). stdout and stderr go to out
// (nil discards). The process is killed when ctx ends or the cluster closes.
// The host's /run, /tmp and /etc/keepalived are hidden from the command:
// put binaries it needs elsewhere (e.g. under /var/tmp).
func (n *Node) Start(ctx context.Context, argv, env []string, out io.Writer) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("lab: Start needs a command")
	}
	if err := os.MkdirAll("/etc/keepalived", 0o755); err != nil {
		return nil, fmt.Errorf("creating the /etc/keepalived mount point: %w", err)
	}
	args := append([]string{"--net=/run/netns/" + n.Netns, "--", "sh", "-c", containerInit, "sh"}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.Env = slices.Clone(env)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		cmd.Env = append(cmd.Env, defaultPath)
	}
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	// Pdeathsig is a safety net for a harness killed without Close: the
	// node's processes die with it instead of holding VIPs forever. It is
	// tied to the thread that forks, so the fork happens on a thread that
	// lives as long as this process (see startFromForker).
	if err := startFromForker(cmd); err != nil {
		return nil, fmt.Errorf("starting %q in %s: %w", argv, n.Name, err)
	}
	p := &Process{Pid: cmd.Process.Pid, Argv: argv, node: n, cmd: cmd, done: make(chan struct{})}
	go p.wait()
	go func() {
		select {
		case <-ctx.Done():
			_ = p.Kill()
		case <-p.done:
		}
	}()
	n.mu.Lock()
	n.procs = append(n.procs, p)
	n.mu.Unlock()
	n.cluster.log.Info("started", "node", n.Name, "pid", p.Pid, "argv", strings.Join(argv, " "))
	return p, nil
}

// Running returns the processes started on this node that have not exited.
func (n *Node) Running() []*Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	var live []*Process
	for _, p := range n.procs {
		if !p.Exited() {
			live = append(live, p)
		}
	}
	return live
}

// Exec runs a one-off command in the node's network namespace (mount and
// PID namespaces of the host) and returns its combined output. A non-zero
// exit is an error that quotes the output.
func (n *Node) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	return execOut(ctx, append([]string{"nsenter", "--net=/run/netns/" + n.Netns, "--"}, argv...))
}

func execOut(ctx context.Context, argv []string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Crash is a power cut: every process in the PID namespaces of the
// processes started on the node is stopped, then killed, then eth0 goes
// down (LinkDown). Addresses on eth0 stay (VIPs included), as they would on
// a machine that froze.
func (n *Node) Crash() error {
	n.killAll()
	if err := n.LinkDown(); err != nil {
		return err
	}
	n.cluster.log.Info("crashed", "node", n.Name)
	return nil
}

// LinkDown cuts the node off the bridge: eth0 goes down, its addresses
// stay. Rejoin undoes it.
func (n *Node) LinkDown() error {
	h, link, err := n.eth0()
	if err != nil {
		return err
	}
	if err := h.LinkSetDown(link); err != nil {
		return fmt.Errorf("%s: setting %s down: %w", n.Name, Link, err)
	}
	return nil
}

// Rejoin brings eth0 back up after Crash or LinkDown and restores the default routes
// the kernel dropped with the link. Stale addresses are left alone.
func (n *Node) Rejoin(ctx context.Context) error {
	h, link, err := n.eth0()
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s: setting %s up: %w", n.Name, Link, err)
	}
	for _, argv := range n.routeSteps() {
		if err := run(ctx, argv); err != nil {
			return err
		}
	}
	n.cluster.log.Info("rejoined", "node", n.Name)
	return nil
}

// Up reports whether eth0 is administratively up (false after Crash).
func (n *Node) Up() (bool, error) {
	_, link, err := n.eth0()
	if err != nil {
		return false, err
	}
	return link.Attrs().Flags&net.FlagUp != 0, nil
}

// Addrs returns the addresses on the node's eth0 (link-local ones
// excluded), read with netlink inside the node's namespace.
func (n *Node) Addrs() ([]netip.Prefix, error) {
	h, link, err := n.eth0()
	if err != nil {
		return nil, err
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("%s: listing addresses: %w", n.Name, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.IsLinkLocalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

// Has reports whether addr is on the node's eth0, whatever the link state.
func (n *Node) Has(addr netip.Addr) (bool, error) {
	addrs, err := n.Addrs()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr() == addr }), nil
}

// Dial connects from the node's network namespace. address must be an IP
// literal with a port ("192.0.2.100:80", "[2001:db8::100]:80"): no name
// resolution happens, so the socket is created on the calling thread while
// it sits in the namespace.
func (n *Node) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(address); err != nil {
		return nil, fmt.Errorf("lab: dial %q: want an IP literal and a port: %w", address, err)
	}
	var conn net.Conn
	err := InNetns(n.Netns, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil && conn != nil {
		conn.Close()
		conn = nil
	}
	return conn, err
}

func (n *Node) killAll() {
	n.mu.Lock()
	procs := slices.Clone(n.procs)
	n.mu.Unlock()
	// Stop everything first, then kill: killed one by one, keepalived's
	// VRRP child outlives its parent by a moment and gets SIGTERM from
	// the parent's death (its Pdeathsig), and could send the priority-0
	// adverts that a crashed node never sends. A stopped process cannot.
	signalAll := func(sig syscall.Signal) {
		for _, p := range procs {
			if p.Exited() {
				continue
			}
			if ps, err := p.Procs(); err == nil {
				for _, q := range ps {
					_ = syscall.Kill(q.Pid, sig)
				}
			}
		}
	}
	signalAll(syscall.SIGSTOP)
	signalAll(syscall.SIGKILL)
	for _, p := range procs {
		_ = p.Kill()
	}
	for _, p := range procs {
		<-p.done
	}
}
