// Package lab builds a small cluster of network namespaces for tests, the
// demo and the benchmarks: a bridge in its own namespace, N nodes each with
// an eth0 on that bridge, and a client namespace from which VIPs are probed.
//
// Addresses (all TEST-NET):
//
//	bridge (gateway)  192.0.2.1     2001:db8::1
//	host i (1-based)  192.0.2.1+i   2001:db8::1+i
//	node i (1-based)  192.0.2.10+i  2001:db8::10+i (hex)
//	client            192.0.2.254   2001:db8::fe
//
// Hosts are machines on the nodes' network that are not nodes (a
// Kubernetes control plane, say): they never count as VIP holders.
// Every node has a default route via the gateway, so a program that looks
// for the interface of the default route finds eth0. Namespace names carry a
// random suffix, so clusters built in parallel never collide. A Cluster needs
// root; it never touches the root network namespace.
//
// IPv4 and IPv6 forwarding are set explicitly in every namespace: off, or on
// in the nodes with Options.Routing (never in the hosts). A new namespace would otherwise inherit
// the host's IPv4 forwarding, which podman and kubelets turn on, and whether
// a node that let a VIP go still forwards a client's packets to its new
// holder (hiding a client that points at the wrong node) would depend on
// what the machine last did.
//
// A Cluster is used from Go tests and from plain programs alike: it logs to
// a *slog.Logger and reports errors, it never calls testing functions.
package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// Addresses of the lab network.
var (
	Prefix4  = netip.MustParsePrefix("192.0.2.0/24")
	Prefix6  = netip.MustParsePrefix("2001:db8::/64")
	Gateway4 = netip.MustParseAddr("192.0.2.1")
	Gateway6 = netip.MustParseAddr("2001:db8::1")
	Client4  = netip.MustParseAddr("192.0.2.254")
	Client6  = netip.MustParseAddr("2001:db8::fe")
)

// NetnsPrefix starts the name of every network namespace a Cluster makes.
const NetnsPrefix = "lab-"

// Options shape a Cluster. The zero value is a 3-node cluster that logs
// nothing.
type Options struct {
	// Nodes is the number of nodes, 1..100; 0 means 3.
	Nodes int
	// Hosts names the extra hosts on the bridge, at most 9.
	Hosts []string
	// Logger receives one line per step; nil discards.
	Logger *slog.Logger
	// Routing turns IPv4 and IPv6 forwarding on in the nodes, as on most
	// Kubernetes nodes: a node forwards a packet for an address it does
	// not have (a VIP it gave up) to the address's holder, and sends the
	// client an ICMP redirect. Off (the zero value), a node drops it. The
	// client and the bridge never forward.
	Routing bool
}

// Cluster is a bridge, its nodes and a client, each in its own network
// namespace.
type Cluster struct {
	// Name is the random suffix shared by all namespaces of the cluster.
	Name string
	// Nodes are the nodes, Nodes[0] is "node1" with address .11.
	Nodes []*Node
	// Hosts are the extra hosts of Options.Hosts, in that order.
	Hosts []*Node
	// Client is the namespace tests probe from. Start works there too,
	// but it is meant for Dial, HTTPClient and Exec.
	Client *Node
	// Routing says whether the nodes forward (Options.Routing).
	Routing bool

	bridgeNetns string
	log         *slog.Logger
	// attached: another process built the cluster and removes it; Close
	// leaves its namespaces alone.
	attached bool

	closeOnce sync.Once
	closeErr  error
}

// New builds a cluster. On error it removes whatever it made.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("lab: building namespaces needs root")
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("lab: random name: %w", err)
	}
	c, err := layout(hex.EncodeToString(suffix), opts)
	if err != nil {
		return nil, err
	}
	if err := c.build(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	c.log.Info("cluster ready", "nodes", len(c.Nodes), "bridge_netns", c.bridgeNetns, "routing", c.Routing)
	return c, nil
}

// Attach returns the cluster called name that New built in another
// process, with the same Options: its nodes, hosts and client, for Exec,
// Dial, Holders and the like. Closing it kills what this process started
// there and leaves the namespaces to the process that built them (see
// Remove).
func Attach(name string, opts Options) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("lab: entering namespaces needs root")
	}
	c, err := layout(name, opts)
	if err != nil {
		return nil, err
	}
	c.attached = true
	for _, n := range c.all() {
		if _, err := os.Stat("/run/netns/" + n.Netns); err != nil {
			return nil, fmt.Errorf("lab: attaching to cluster %s: %w", name, err)
		}
		if err := n.openHandle(); err != nil {
			c.closeHandles()
			return nil, err
		}
	}
	return c, nil
}

// Keep makes Close leave the namespaces in place, as for a cluster from
// Attach: the cluster outlives this process, and Remove deletes it.
func (c *Cluster) Keep() { c.attached = true }

// Remove deletes the namespaces of the cluster called name, built by New
// with the same Options in another process, that still exist. Their
// processes must be gone first: a namespace in use only disappears from
// /run/netns.
func Remove(name string, opts Options) error {
	c, err := layout(name, opts)
	if err != nil {
		return err
	}
	return c.Close()
}

// layout names a cluster's namespaces and addresses without making them.
func layout(name string, opts Options) (*Cluster, error) {
	n := opts.Nodes
	if n == 0 {
		n = 3
	}
	if n < 1 || n > 100 {
		return nil, fmt.Errorf("lab: %d nodes: must be 1..100", n)
	}
	if len(opts.Hosts) > 9 {
		return nil, fmt.Errorf("lab: %d hosts: at most 9", len(opts.Hosts))
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{Name: name, Routing: opts.Routing}
	c.log = log.With("cluster", c.Name)
	c.bridgeNetns = NetnsPrefix + c.Name + "-br"
	for i, h := range opts.Hosts {
		c.Hosts = append(c.Hosts, &Node{
			Name:    h,
			Netns:   fmt.Sprintf("%s%s-h%d", NetnsPrefix, c.Name, i+1),
			Addr4:   netip.AddrFrom4([4]byte{192, 0, 2, byte(2 + i)}),
			Addr6:   addr6(byte(2 + i)),
			cluster: c,
		})
	}
	for i := 1; i <= n; i++ {
		c.Nodes = append(c.Nodes, &Node{
			Name:    fmt.Sprintf("node%d", i),
			Netns:   fmt.Sprintf("%s%s-n%d", NetnsPrefix, c.Name, i),
			Addr4:   netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}),
			Addr6:   addr6(byte(0x10 + i)),
			cluster: c,
		})
	}
	c.Client = &Node{
		Name:    "client",
		Netns:   NetnsPrefix + c.Name + "-cl",
		Addr4:   Client4,
		Addr6:   Client6,
		cluster: c,
	}
	// The bridge ports, as build names them (CutVRRP filters on them).
	for i, n := range c.all() {
		n.port = fmt.Sprintf("p%d", i+1)
	}
	c.Client.port = "pcl"
	return c, nil
}

// all lists the nodes, the hosts and the client.
func (c *Cluster) all() []*Node {
	return append(append(append([]*Node{}, c.Nodes...), c.Hosts...), c.Client)
}

// forwarding are the sysctls that turn IPv4 and IPv6 forwarding on or off
// on every interface of a namespace (and on those that come later).
func forwarding(on bool) []string {
	v := "0"
	if on {
		v = "1"
	}
	return []string{
		"net.ipv4.ip_forward=" + v,
		"net.ipv4.conf.default.forwarding=" + v,
		"net.ipv6.conf.all.forwarding=" + v,
		"net.ipv6.conf.default.forwarding=" + v,
	}
}

func addr6(last byte) netip.Addr {
	a := Prefix6.Addr().As16()
	a[15] = last
	return netip.AddrFrom16(a)
}

// Node returns the node called name ("node1"...), or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Host returns the host called name, or nil.
func (c *Cluster) Host(name string) *Node {
	for _, n := range c.Hosts {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func (c *Cluster) build(ctx context.Context) error {
	// Sysctls before the veths appear, so new interfaces inherit them:
	// no DAD delay on IPv6 (VRRPv3 speaks from the link-local address) and
	// IPv6 addresses kept on link down, as IPv4 ones are (Crash relies on it).
	sysctls := []string{
		"net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.all.accept_dad=0",
		"net.ipv6.conf.default.keep_addr_on_down=1",
		"net.ipv6.conf.all.keep_addr_on_down=1",
	}
	steps := [][]string{
		{"ip", "netns", "add", c.bridgeNetns},
		append([]string{"ip", "netns", "exec", c.bridgeNetns, "sysctl", "-q", "-w"}, append(sysctls, forwarding(false)...)...),
		{"ip", "-n", c.bridgeNetns, "link", "set", "lo", "up"},
		// Multicast snooping off: VRRP adverts (224.0.0.18, ff02::12)
		// must reach every port.
		{"ip", "-n", c.bridgeNetns, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "stp_state", "0", "forward_delay", "0"},
		{"ip", "-n", c.bridgeNetns, "addr", "add", Gateway4.String() + "/24", "dev", "br0"},
		{"ip", "-n", c.bridgeNetns, "addr", "add", Gateway6.String() + "/64", "dev", "br0", "nodad"},
		{"ip", "-n", c.bridgeNetns, "link", "set", "br0", "up"},
	}
	for _, n := range c.all() {
		port := n.port
		steps = append(steps,
			[]string{"ip", "netns", "add", n.Netns},
			append([]string{"ip", "netns", "exec", n.Netns, "sysctl", "-q", "-w"}, sysctls...),
			[]string{"ip", "-n", n.Netns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", c.bridgeNetns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.Netns},
			[]string{"ip", "-n", c.bridgeNetns, "link", "set", port, "master", "br0", "up"},
			[]string{"ip", "-n", n.Netns, "addr", "add", n.Addr4.String() + "/24", "dev", "eth0"},
			[]string{"ip", "-n", n.Netns, "addr", "add", n.Addr6.String() + "/64", "dev", "eth0", "nodad"},
			[]string{"ip", "-n", n.Netns, "link", "set", "eth0", "up"},
			// After eth0 arrived: these set every interface there is.
			append([]string{"ip", "netns", "exec", n.Netns, "sysctl", "-q", "-w"}, forwarding(c.Routing && slices.Contains(c.Nodes, n))...),
		)
		steps = append(steps, n.routeSteps()...)
	}
	for _, argv := range steps {
		if err := run(ctx, argv); err != nil {
			return err
		}
	}
	for _, n := range c.all() {
		if err := n.openHandle(); err != nil {
			return err
		}
	}
	return nil
}

// Close kills every process the cluster started and deletes its
// namespaces (which takes the veths and the bridge with them); a cluster
// from Attach, or kept, keeps its namespaces. The mount namespaces of
// started processes die with their processes. Close is idempotent and safe
// to call on a half-built cluster.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		for _, n := range c.all() {
			n.killAll()
		}
		c.closeHandles()
		if c.attached {
			return
		}
		for _, name := range c.netnsNames() {
			if _, err := os.Stat("/run/netns/" + name); errors.Is(err, os.ErrNotExist) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := run(ctx, []string{"ip", "netns", "del", name}); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		c.closeErr = errors.Join(errs...)
		c.log.Info("cluster removed", "error", c.closeErr)
	})
	return c.closeErr
}

func (c *Cluster) closeHandles() {
	for _, n := range c.all() {
		n.closeHandle()
	}
}

func (c *Cluster) netnsNames() []string {
	names := []string{}
	for _, n := range c.all() {
		names = append(names, n.Netns)
	}
	return append(names, c.bridgeNetns)
}

// Leftovers lists the network namespaces of this cluster that still exist;
// after Close it should be empty.
func (c *Cluster) Leftovers() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var left []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), NetnsPrefix+c.Name+"-") {
			left = append(left, e.Name())
		}
	}
	return left, nil
}

// run runs a host command and returns an error quoting its output.
func run(ctx context.Context, argv []string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Output is an io.Writer that keeps everything written to it and copies it
// to an optional writer (nil: keep only). Safe for concurrent use.
type Output struct {
	mu   sync.Mutex
	buf  []byte
	copy io.Writer
}

// NewOutput returns an Output that also copies to w (may be nil).
func NewOutput(w io.Writer) *Output { return &Output{copy: w} }

// Write implements io.Writer.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if o.copy != nil {
		_, _ = o.copy.Write(p)
	}
	return len(p), nil
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}

// Count returns how many times s occurs in what was written so far.
func (o *Output) Count(s string) int {
	return strings.Count(o.String(), s)
}

// BridgeExec runs a one-off command in the bridge's network namespace, e.g.
// an nft rule in the bridge family to filter what the bridge forwards.
func (c *Cluster) BridgeExec(ctx context.Context, argv ...string) ([]byte, error) {
	return execOut(ctx, append([]string{"nsenter", "--net=/run/netns/" + c.bridgeNetns, "--"}, argv...))
}
