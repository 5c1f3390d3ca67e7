package splitbrain

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/nstest"
	"github.com/ipfailover/ipfailover/test/syncbuf"
)

// pair is two network namespaces, "node" and "peer", joined by a veth
// whose ends are both called eth0: node 192.0.2.11 and 2001:db8::11, peer
// 192.0.2.12 and 2001:db8::12.
type pair struct {
	node, peer string
	peerMAC    net.HardwareAddr
	nl         *host.Netlink
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{node: nstest.New(t, "ipf-sb-node"), peer: nstest.New(t, "ipf-sb-peer")}
	run(t, "ip", "link", "add", "eth0", "netns", p.node, "type", "veth", "peer", "name", "eth0", "netns", p.peer)
	for _, side := range []struct{ ns, a4, a6 string }{{p.node, "192.0.2.11/24", "2001:db8::11/64"}, {p.peer, "192.0.2.12/24", "2001:db8::12/64"}} {
		nstest.IP(t, side.ns, "addr", "add", side.a4, "dev", "eth0")
		nstest.IP(t, side.ns, "addr", "add", side.a6, "dev", "eth0", "nodad")
		nstest.IP(t, side.ns, "link", "set", "lo", "up")
		nstest.IP(t, side.ns, "link", "set", "eth0", "up")
	}
	ns, err := netns.GetFromName(p.node)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if p.nl, err = host.NewNetlinkAt(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.nl.Close)
	out, err := exec.Command("ip", "-n", p.peer, "-br", "link", "show", "eth0").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if p.peerMAC, err = net.ParseMAC(f[len(f)-2]); err != nil {
		t.Fatalf("peer MAC in %q: %v", out, err)
	}
	return p
}

// bothHold puts 192.0.2.100 and 2001:db8::100 on both sides, a split
// brain, and runs a guard for them in the node.
func (p *pair) bothHold(t *testing.T) (*Guard, *syncbuf.Buffer) {
	t.Helper()
	for _, ns := range []string{p.node, p.peer} {
		nstest.IP(t, ns, "addr", "add", "192.0.2.100/32", "dev", "eth0")
		nstest.IP(t, ns, "addr", "add", "2001:db8::100/128", "dev", "eth0", "nodad")
	}
	return p.guard(t, config.Raw{VirtualIPs: "192.0.2.100,2001:db8::100"})
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// guard runs a guard in the node namespace with its real sockets, opened
// there, and returns it with its log.
func (p *pair) guard(t *testing.T, raw config.Raw) (*Guard, *syncbuf.Buffer) {
	t.Helper()
	return p.guardWith(t, raw, Options{})
}

// guardWith is guard with o's callbacks.
func (p *pair) guardWith(t *testing.T, raw config.Raw, o Options) (*Guard, *syncbuf.Buffer) {
	t.Helper()
	pl := testPlan(t, raw)
	ifi, err := p.nl.Interface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	var socks sockets
	if err := lab.InNetns(p.node, func() error {
		var errs []error
		socks, errs = openSockets(&ifi, expectations(pl), o.Took != nil)
		if len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	o.Plan, o.Host, o.Keepalived, o.Logger = pl, p.nl, &fakeKeepalived{}, slog.New(slog.NewTextHandler(logs, nil))
	g, err := newGuard(o,
		&ifi, nil, socks, timing{probe: 200 * time.Millisecond, confirm: 100 * time.Millisecond, grace: time.Second, relist: time.Second,
			contest: 200 * time.Millisecond, spacing: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("guard's log:\n%s", logs.String())
		}
	})
	return g, logs
}

func waitUntil(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no %s within 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestKernelDuplicates: the peer's kernel holds the node's VIPs too, and
// answers the node's ARP probe and neighbour solicitation as any Linux
// host does; the guard sees both conflicts with the peer's MAC, and their
// end when the peer lets go.
func TestKernelDuplicates(t *testing.T) {
	p := newPair(t)
	v4, v6 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("2001:db8::100")
	g, logs := p.bothHold(t)
	took := waitUntil(t, "both conflicts", func() bool {
		d := g.Snapshot().Duplicates
		return len(d[v4]) == 1 && len(d[v6]) == 1
	})
	t.Logf("both conflicts seen %v after the guard started", took)
	for v, macs := range g.Snapshot().Duplicates {
		if macs[0].String() != p.peerMAC.String() {
			t.Errorf("%s: other MAC %s, want the peer's %s", v, macs[0], p.peerMAC)
		}
	}
	for _, v := range []string{"192.0.2.100", "2001:db8::100"} {
		if l := logs.Lines("duplicate VIP: another host answers"); !strings.Contains(strings.Join(l, "\n"), "vip="+v+" other_mac="+p.peerMAC.String()) {
			t.Errorf("no start logged for %s with %s: %q", v, p.peerMAC, l)
		}
	}

	nstest.IP(t, p.peer, "addr", "del", "192.0.2.100/32", "dev", "eth0")
	nstest.IP(t, p.peer, "addr", "del", "2001:db8::100/128", "dev", "eth0")
	took = waitUntil(t, "the conflicts to end", func() bool { return len(g.Snapshot().Duplicates) == 0 })
	t.Logf("conflicts over %v after the peer let go", took)
	if l := logs.Lines("duplicate VIP over: no other host answers"); len(l) != 2 {
		t.Errorf("ends logged: %q, want two", l)
	}
}

// keepalivedConf is a plain keepalived's configuration for the peer: vrid
// 11 with another password, vrid 12 (IPv6) with another VIP, vrid 13 just
// as this deployment has it.
const keepalivedConf = `global_defs {
   router_id peer
   script_user root
}
vrrp_instance other_password {
   interface eth0
   state MASTER
   virtual_router_id 11
   priority 200
   authentication {
      auth_type PASS
      auth_pass another
   }
   virtual_ipaddress {
      192.0.2.100 dev eth0
   }
}
vrrp_instance other_vips {
   interface eth0
   state MASTER
   virtual_router_id 12
   priority 200
   virtual_ipaddress {
      2001:db8::200 dev eth0
   }
}
vrrp_instance member {
   interface eth0
   state MASTER
   virtual_router_id 13
   priority 200
   authentication {
      auth_type PASS
      auth_pass OpenShift-IPFailover
   }
   virtual_ipaddress {
      192.0.2.102 dev eth0
   }
}
`

// TestKernelForeignAdverts runs the real keepalived in the peer with two
// instances on this deployment's router ids that are not this deployment's
// and one that is; the node listens the way its keepalived would (a member
// of the VRRP groups). The guard counts the first two, by router id and
// source, and not the third.
func TestKernelForeignAdverts(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("needs keepalived")
	}
	p := newPair(t)
	g, logs := p.guard(t, config.Raw{VirtualIPs: "192.0.2.100,2001:db8::100,192.0.2.102"})
	p.joinVRRP(t)

	dir := t.TempDir()
	conf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(conf, []byte(keepalivedConf), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("ip", "netns", "exec", p.peer, "keepalived", "-n", "-l", "--vrrp", "-f", conf,
		"-p", filepath.Join(dir, "k.pid"), "-r", filepath.Join(dir, "v.pid"), "-c", filepath.Join(dir, "c.pid"))
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("keepalived's output:\n%s", out.String())
		}
	})
	ll, err := linkLocal(p.peer)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "foreign adverts on vrid 11 and 12", func() bool {
		n := 0
		for _, f := range g.Snapshot().Foreign {
			if f.VRID == 11 && f.Source == "192.0.2.12" || f.VRID == 12 && f.Source == ll.String() {
				n++
			}
		}
		return n == 2
	})
	t.Logf("both foreign speakers counted %v after keepalived started", time.Since(start).Round(time.Millisecond))
	// The member sends as often: let it, then check it never counted.
	time.Sleep(2 * time.Second)
	for _, f := range g.Snapshot().Foreign {
		if f.VRID == 13 || f.VRID != 11 && f.VRID != 12 {
			t.Errorf("counted %+v: only vrid 11 and 12 are foreign", f)
		}
	}
	// The kernel filter itself: sockets like the guard's see the foreign
	// adverts and never the member's.
	p.filteredVRIDs(t, expectations(testPlan(t, config.Raw{VirtualIPs: "192.0.2.100,2001:db8::100,192.0.2.102"})))
	if l := logs.Lines("foreign VRRP speaker"); len(l) != 2 {
		t.Errorf("log lines %q, want one per source", l)
	} else if joined := strings.Join(l, "\n"); !strings.Contains(joined, "another authentication password") || !strings.Contains(joined, "VIPs [2001:db8::200]") {
		t.Errorf("log lines %q do not say what differs", l)
	}
}

// filteredVRIDs reads the node's filtered VRRP sockets for three seconds
// and checks which router ids get through: 11 and 12, not 13.
func (p *pair) filteredVRIDs(t *testing.T, expect map[key]expectation) {
	t.Helper()
	ifi, err := p.nl.Interface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	var c4, c6 conn
	if err := lab.InNetns(p.node, func() error {
		var err error
		if c4, err = listenVRRP(&ifi, expect, false); err != nil {
			return err
		}
		c6, err = listenVRRP(&ifi, expect, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	seen := make(chan int, 100)
	for _, c := range []conn{c4, c6} {
		go func() {
			buf := make([]byte, 1500)
			for {
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					return
				}
				if n > 1 {
					seen <- int(buf[1])
				}
			}
		}()
	}
	// Go strips the IPv4 header: the router id is the second byte of
	// both.
	time.Sleep(3 * time.Second)
	c4.Close()
	c6.Close()
	close(seen)
	got := map[int]int{}
	for v := range seen {
		got[v]++
	}
	t.Logf("adverts through the kernel filter, by router id: %v", got)
	if got[11] == 0 || got[12] == 0 || got[13] != 0 {
		t.Errorf("adverts through the kernel filter by router id %v, want 11 and 12 (foreign), never 13 (a member)", got)
	}
}

// joinVRRP makes the node a member of the VRRP multicast groups on eth0,
// as its keepalived is: without a member, the kernel drops the adverts.
func (p *pair) joinVRRP(t *testing.T) {
	t.Helper()
	err := lab.InNetns(p.node, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c4, err := net.ListenPacket("ip4:112", "0.0.0.0")
		if err != nil {
			return err
		}
		t.Cleanup(func() { c4.Close() })
		if err := ipv4.NewPacketConn(c4).JoinGroup(ifi, &net.IPAddr{IP: net.ParseIP("224.0.0.18")}); err != nil {
			return err
		}
		c6, err := net.ListenPacket("ip6:112", "::")
		if err != nil {
			return err
		}
		t.Cleanup(func() { c6.Close() })
		return ipv6.NewPacketConn(c6).JoinGroup(ifi, &net.IPAddr{IP: net.ParseIP("ff02::12")})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// linkLocal returns the link-local address of eth0 in ns, which keepalived
// speaks VRRPv3 over IPv6 from.
func linkLocal(ns string) (netip.Addr, error) {
	out, err := exec.Command("ip", "-n", ns, "-6", "-br", "addr", "show", "eth0", "scope", "link").Output()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, f := range strings.Fields(string(out)) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().IsLinkLocalUnicast() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no link-local address on eth0 in %s: %q", ns, out)
}

// TestKernelAnnounces: the peer's kernel holds the node's VIPs too (a split
// brain); when it lets them go, the node's guard announces them, and the
// peer's kernel, which meanwhile had entries for them pointing elsewhere,
// takes the node's gratuitous ARP and neighbour advertisement: its entries
// name the node's MAC. A probe from the peer for a VIP it no longer has (a
// stray's remover) makes the node announce it too.
func TestKernelAnnounces(t *testing.T) {
	p := newPair(t)
	v4, v6 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("2001:db8::100")
	g, logs := p.bothHold(t)
	nodeMAC, err := p.nl.Interface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both conflicts", func() bool {
		d := g.Snapshot().Duplicates
		return len(d[v4]) == 1 && len(d[v6]) == 1
	})
	// The peer lets go and, as a client that followed it would, has
	// entries for the VIPs that do not name the node.
	bogus := "02:00:00:00:00:99"
	for _, argv := range [][]string{
		{"addr", "del", "192.0.2.100/32", "dev", "eth0"},
		{"addr", "del", "2001:db8::100/128", "dev", "eth0"},
		{"neigh", "replace", "192.0.2.100", "lladdr", bogus, "nud", "stale", "dev", "eth0"},
		{"-6", "neigh", "replace", "2001:db8::100", "lladdr", bogus, "nud", "stale", "dev", "eth0"},
	} {
		nstest.IP(t, p.peer, argv...)
	}
	neigh := func(v netip.Addr) string {
		out, err := exec.Command("ip", "-n", p.peer, "neigh", "show", v.String(), "dev", "eth0").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	took := waitUntil(t, "the peer's entries to name the node", func() bool {
		return strings.Contains(neigh(v4), nodeMAC.HardwareAddr.String()) && strings.Contains(neigh(v6), nodeMAC.HardwareAddr.String())
	})
	t.Logf("the peer's entries name the node %v after it let go: %q %q", took, neigh(v4), neigh(v6))
	if n := g.Snapshot().Announced; n[v4] < 1 || n[v6] < 1 {
		t.Errorf("announcements counted %v, want both VIPs", n)
	}
	if l := logs.Lines("VIP contest over"); len(l) < 2 {
		t.Errorf("log lines %q, want one per VIP", l)
	}

	// A probe from the peer, which has neither VIP: announced again.
	before := g.Snapshot().Announced
	time.Sleep(time.Second) // the spacing between two announcements
	for _, argv := range [][]string{
		{"neigh", "replace", "192.0.2.100", "lladdr", bogus, "nud", "stale", "dev", "eth0"},
		{"-6", "neigh", "replace", "2001:db8::100", "lladdr", bogus, "nud", "stale", "dev", "eth0"},
	} {
		nstest.IP(t, p.peer, argv...)
	}
	var socks sockets
	if err := lab.InNetns(p.peer, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		var errs []error
		socks, errs = openSockets(ifi, expectations(testPlan(t, config.Raw{VirtualIPs: "192.0.2.100,2001:db8::100"})), true)
		if len(errs) > 0 {
			return fmt.Errorf("%v", errs)
		}
		probe4, err := arpProbe(p.peerMAC, v4)
		if err != nil {
			return err
		}
		if _, err := socks.arp.WriteTo(probe4, &packet.Addr{HardwareAddr: broadcastMAC}); err != nil {
			return err
		}
		probe6, to, err := nsProbe(p.peerMAC, v6)
		if err != nil {
			return err
		}
		_, err = socks.nsOut.WriteTo(probe6, &packet.Addr{HardwareAddr: to})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer socks.close()
	took = waitUntil(t, "the probed VIPs announced", func() bool {
		n := g.Snapshot().Announced
		return n[v4] > before[v4] && n[v6] > before[v6]
	})
	t.Logf("announced %v after the peer's probes", took)
	waitUntil(t, "the peer's entries to name the node again", func() bool {
		return strings.Contains(neigh(v4), nodeMAC.HardwareAddr.String()) && strings.Contains(neigh(v6), nodeMAC.HardwareAddr.String())
	})
}

// TestKernelAnnouncesATakeoverAgain: a round after keepalived says it took
// an instance, the guard announces its VIPs once more, so that a client
// the host letting go pointed back at itself (its neighbour solicitation
// from the VIP, sent as it let go) follows this node. Here the peer plays
// that client, its entries naming another MAC; before keepalived's word
// the guard says nothing, and these announcements are not counted as the
// ends of contests.
func TestKernelAnnouncesATakeoverAgain(t *testing.T) {
	p := newPair(t)
	v4, v6 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("2001:db8::100")
	nstest.IP(t, p.node, "addr", "add", "192.0.2.100/32", "dev", "eth0")
	nstest.IP(t, p.node, "addr", "add", "2001:db8::100/128", "dev", "eth0", "nodad")
	raw := config.Raw{VirtualIPs: "192.0.2.100,2001:db8::100"}
	g, _ := p.guard(t, raw)
	bogus := "02:00:00:00:00:99"
	nstest.IP(t, p.peer, "neigh", "replace", "192.0.2.100", "lladdr", bogus, "nud", "stale", "dev", "eth0")
	nstest.IP(t, p.peer, "-6", "neigh", "replace", "2001:db8::100", "lladdr", bogus, "nud", "stale", "dev", "eth0")
	neigh := func(v netip.Addr) string {
		out, err := exec.Command("ip", "-n", p.peer, "neigh", "show", v.String(), "dev", "eth0").Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	mac := p.nodeMAC(t).String()
	time.Sleep(time.Second)
	if strings.Contains(neigh(v4), mac) || strings.Contains(neigh(v6), mac) {
		t.Fatalf("the peer's entries name the node before any takeover: %q %q", neigh(v4), neigh(v6))
	}
	for _, in := range testPlan(t, raw).Instances {
		g.notes <- keepalived.Notification{Instance: in.Name, State: keepalived.StateNameMaster, Priority: in.Priority}
	}
	took := waitUntil(t, "the peer's entries to name the node", func() bool {
		return strings.Contains(neigh(v4), mac) && strings.Contains(neigh(v6), mac)
	})
	t.Logf("the peer's entries name the node %v after keepalived's MASTER lines (a round: 200ms): %q %q", took, neigh(v4), neigh(v6))
	if n := g.Snapshot().Announced; n[v4] != 0 || n[v6] != 0 {
		t.Errorf("announcements counted %v, want none: no contest ended", n)
	}
}

// TestKernelProbesLeaveClientsAlone: a node that died with its addresses
// (its kernel still answers for an IPv6 VIP this node now holds) answers
// this node's probes, and the duplicate shows, but a client on the link
// goes on sending the VIP's packets to this node. A duplicate address
// detection probe, from the unspecified address, would have the other
// kernel answer all nodes with the override flag, and the client would
// follow it to the dead node (make chaos: the IPv6 VIP unreachable for as
// long as the node was dead).
func TestKernelProbesLeaveClientsAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make the lab's namespaces")
	}
	c, err := lab.New(t.Context(), lab.Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	node, dead := c.Nodes[0], c.Nodes[1]
	v6 := netip.MustParseAddr("2001:db8::100")
	for _, n := range []*lab.Node{node, dead} {
		if out, err := n.Exec(t.Context(), "ip", "addr", "add", v6.String()+"/128", "dev", "eth0", "nodad"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	nodeMAC, err := node.MAC()
	if err != nil {
		t.Fatal(err)
	}
	// The client follows this node, as after its gratuitous announcement.
	if out, err := c.Client.Exec(t.Context(), "ip", "-6", "neigh", "replace", v6.String(), "lladdr", nodeMAC.String(), "nud", "reachable", "dev", "eth0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ns, err := netns.GetFromName(node.Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	p := &pair{node: node.Netns, peer: dead.Netns}
	if p.nl, err = host.NewNetlinkAt(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.nl.Close)
	g, _ := p.guard(t, config.Raw{VirtualIPs: v6.String()})
	waitUntil(t, "the duplicate", func() bool { return len(g.Snapshot().Duplicates[v6]) == 1 })
	// A few more rounds and contest probes.
	time.Sleep(time.Second)
	out, err := c.Client.Exec(t.Context(), "ip", "-6", "neigh", "show", v6.String(), "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), nodeMAC.String()) {
		t.Errorf("the client's entry for %s is %q, want this node's MAC %s", v6, strings.TrimSpace(string(out)), nodeMAC)
	}
}

// peerKeepalived runs keepalived in the peer with conf until the returned
// process is stopped (and at the test's end).
func (p *pair) peerKeepalived(t *testing.T, conf string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", p.peer, "keepalived", "-n", "-l", "--vrrp", "-f", path,
		"-p", filepath.Join(dir, "k.pid"), "-r", filepath.Join(dir, "v.pid"), "-c", filepath.Join(dir, "c.pid"))
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("keepalived's output:\n%s", out.String())
		}
	})
	return cmd
}

// peerMaster is the peer's keepalived: master of this deployment's vrid
// 11 (192.0.2.100, no password: VRRPv3 every 0.2 s), above this node's
// priority.
const peerMaster = `global_defs {
   router_id peer
   vrrp_version 3
}
vrrp_instance VI {
   interface eth0
   state MASTER
   virtual_router_id 11
   priority 254
   advert_int 0.2
   virtual_ipaddress {
      192.0.2.100 dev eth0
   }
}
`

// TestKernelTakeovers: the real kernel and a real keepalived in the peer.
// The guard's clock hears the peer's adverts; this node's keepalived
// (its notify lines, fed by hand) takes the instance after the peer was
// killed (silent) and after the peer stopped (a priority-0 hand-over), and
// leaves it to the peer coming back (a higher priority); each takeover is
// told with its previous master, its last advert and this node's
// announcement, which goes out of this node for real (here the test's, or
// the guard's own as it puts the VIP of a MASTER back: no keepalived runs
// in the node).
func TestKernelTakeovers(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("needs keepalived")
	}
	p := newPair(t)
	var mu sync.Mutex
	var took []Takeover
	var released []Release
	g, _ := p.guardWith(t, config.Raw{VirtualIPs: "192.0.2.100", Offset: "10", MonitorPort: "0", AdvertInterval: "0.2"}, Options{
		Took:     func(x Takeover) { mu.Lock(); took = append(took, x); mu.Unlock() },
		Released: func(x Release) { mu.Lock(); released = append(released, x); mu.Unlock() },
	})
	p.joinVRRP(t)
	instance := "OpenShift_IPFailover_VIP_1"
	note := func(state keepalived.State) {
		g.notes <- keepalived.Notification{Instance: instance, State: state, Priority: 100}
	}
	heard := func() bool {
		a, ok := g.clock.get(key{vrid: 11})
		return ok && a.src.String() == "192.0.2.12" && a.priority == 254 && time.Since(a.at) < 300*time.Millisecond
	}
	announce := func() {
		t.Helper()
		frame, err := arpAnnouncement(p.nodeMAC(t), netip.MustParseAddr("192.0.2.100"))
		if err != nil {
			t.Fatal(err)
		}
		ifi, err := p.nl.Interface("eth0")
		if err != nil {
			t.Fatal(err)
		}
		if err := lab.InNetns(p.node, func() error {
			c, err := packet.Listen(&ifi, packet.Raw, 0, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.WriteTo(frame, &packet.Addr{HardwareAddr: broadcastMAC})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	lastTook := func(n int) Takeover {
		t.Helper()
		waitUntil(t, fmt.Sprintf("takeover %d", n), func() bool { mu.Lock(); defer mu.Unlock(); return len(took) >= n })
		mu.Lock()
		defer mu.Unlock()
		return took[n-1]
	}

	peer := p.peerKeepalived(t, peerMaster)
	waitUntil(t, "the peer's adverts", heard)
	note(keepalived.StateNameBackup)
	// The peer dies, every process of it at once: silent.
	run(t, "sh", "-c", "ip netns pids "+p.peer+" | xargs -r kill -9")
	_ = peer.Wait()
	time.Sleep(700 * time.Millisecond)
	note(keepalived.StateNameMaster)
	announce()
	to := lastTook(1)
	if to.Cause != CauseSilent || to.From.String() != "192.0.2.12" || to.Announced.IsZero() || to.At.Sub(to.LastAdvert) < 600*time.Millisecond {
		t.Errorf("after the peer died: %+v, want silent from 192.0.2.12, announced, 0.7 s after its last advert", to)
	}
	t.Logf("silent: master %s and announced %s after the last advert", to.At.Sub(to.LastAdvert), to.Announced.Sub(to.LastAdvert))

	// The peer comes back with a higher priority: this node gives way.
	peer = p.peerKeepalived(t, peerMaster)
	waitUntil(t, "the peer's adverts again", heard)
	note(keepalived.StateNameBackup)
	waitUntil(t, "the release", func() bool { mu.Lock(); defer mu.Unlock(); return len(released) == 1 })
	mu.Lock()
	if r := released[0]; r.Cause != ReleaseHigherPriority || r.To.String() != "192.0.2.12" {
		t.Errorf("release %+v, want to the peer's higher priority", r)
	}
	mu.Unlock()
	// The peer stops: its priority-0 advert, a hand-over.
	_ = peer.Process.Signal(os.Interrupt)
	_ = peer.Wait()
	note(keepalived.StateNameMaster)
	to = lastTook(2)
	if to.Cause != CauseHandover || to.From.String() != "192.0.2.12" {
		t.Errorf("after the peer stopped: %+v, want a hand-over from 192.0.2.12", to)
	}
}

// nodeMAC is the node's eth0 address.
func (p *pair) nodeMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	ifi, err := p.nl.Interface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return ifi.HardwareAddr
}

// TestKernelClockStamps: the clock's socket gets each advert's arrival
// time from the kernel, so a reader that runs late still times it when it
// came: an advert left queued for half a second is timed about half a
// second before it was read, and read whole (the IPv4 header off).
func TestKernelClockStamps(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("needs keepalived")
	}
	p := newPair(t)
	ifi, err := p.nl.Interface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	p.joinVRRP(t)
	var c conn
	if err := lab.InNetns(p.node, func() error {
		var err error
		c, err = listenClock(&ifi, map[key]expectation{{vrid: 11}: {version: 3}}, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := newClockReader(c, false)
	if r.stamped == nil {
		t.Fatalf("the clock's socket %T reads no control messages", c)
	}
	p.peerKeepalived(t, peerMaster)
	if _, _, _, err := r.read(); err != nil {
		t.Fatal(err)
	}
	// The next advert comes within 0.2 s and waits in the queue.
	time.Sleep(500 * time.Millisecond)
	b, src, at, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	age := time.Since(at)
	t.Logf("an advert read 0.5 s after the last one: % x from %s, arrived %s before it was read", b, src, age.Round(time.Millisecond))
	if len(b) < 8 || b[0] != 0x31 || b[1] != 11 || b[2] != 254 || src.String() != "192.0.2.12" {
		t.Errorf("read % x from %s, want the peer's VRRPv3 advert for router id 11 at priority 254 from 192.0.2.12", b, src)
	}
	if age < 250*time.Millisecond {
		t.Errorf("an advert queued for at least 0.3 s is timed %s before it was read: the kernel's stamp is not used", age)
	}
}
