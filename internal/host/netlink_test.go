package host_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/test/nstest"
)

// testNS is a fresh network namespace with a netlink handle for setting it
// up and a host.Netlink for the code under test.
type testNS struct {
	name  string
	setup *netlink.Handle
	nl    *host.Netlink
}

// newNS makes a network namespace with a random name and removes it when
// the test ends. It skips the test when not root.
func newNS(tb testing.TB) *testNS {
	tb.Helper()
	name := nstest.New(tb, "ipf-host")
	ns, err := netns.GetFromName(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer ns.Close()
	setup, err := netlink.NewHandleAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(setup.Close)
	nl, err := host.NewNetlinkAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nl.Close)
	return &testNS{name: name, setup: setup, nl: nl}
}

// veth makes the pair a–b in the namespace; with up, both ends are up, so
// a has carrier. Without it only a is up and has no carrier, which keeps
// IPv6 addresses added without nodad tentative.
func (n *testNS) veth(tb testing.TB, a, b string, up bool) {
	tb.Helper()
	la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}
	if err := n.setup.LinkAdd(la); err != nil {
		tb.Fatalf("adding veth %s/%s: %v", a, b, err)
	}
	if err := n.setup.LinkSetUp(n.link(tb, a)); err != nil {
		tb.Fatal(err)
	}
	if up {
		if err := n.setup.LinkSetUp(n.link(tb, b)); err != nil {
			tb.Fatal(err)
		}
	}
}

func (n *testNS) link(tb testing.TB, name string) netlink.Link {
	tb.Helper()
	l, err := n.setup.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// addr adds p to iface the way ip(8) does by default (IPv6 with DAD),
// changed by mod when it is not nil.
func (n *testNS) addr(tb testing.TB, iface, p string, mod func(*netlink.Addr)) {
	tb.Helper()
	a, err := netlink.ParseAddr(p)
	if err != nil {
		tb.Fatal(err)
	}
	if mod != nil {
		mod(a)
	}
	if err := n.setup.AddrAdd(n.link(tb, iface), a); err != nil {
		tb.Fatalf("adding %s to %s: %v", p, iface, err)
	}
}

func nodad(a *netlink.Addr) { a.Flags |= unix.IFA_F_NODAD }

func (n *testNS) defaultRoute(tb testing.TB, iface, gw string, metric int) {
	tb.Helper()
	r := &netlink.Route{LinkIndex: n.link(tb, iface).Attrs().Index, Gw: net.ParseIP(gw), Priority: metric}
	if err := n.setup.RouteAdd(r); err != nil {
		tb.Fatalf("adding default route via %s dev %s: %v", gw, iface, err)
	}
}

func TestDefaultInterface(t *testing.T) {
	tests := []struct {
		name    string
		routes  func(t *testing.T, n *testNS)
		want    string
		wantErr error
	}{
		{
			name: "IPv4 before IPv6",
			routes: func(t *testing.T, n *testNS) {
				n.defaultRoute(t, "ipf1", "2001:db8:1::1", 0)
				n.defaultRoute(t, "ipf0", "192.0.2.1", 0)
			},
			want: "ipf0",
		},
		{
			name:   "IPv6 only",
			routes: func(t *testing.T, n *testNS) { n.defaultRoute(t, "ipf1", "2001:db8:1::1", 0) },
			want:   "ipf1",
		},
		{
			name: "lowest metric",
			routes: func(t *testing.T, n *testNS) {
				n.defaultRoute(t, "ipf0", "192.0.2.1", 200)
				n.defaultRoute(t, "ipf1", "198.51.100.1", 100)
			},
			want: "ipf1",
		},
		{
			name:    "none",
			routes:  func(t *testing.T, n *testNS) {},
			wantErr: host.ErrNoDefaultRoute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNS(t)
			n.veth(t, "ipf0", "ipf0p", true)
			n.veth(t, "ipf1", "ipf1p", true)
			n.addr(t, "ipf0", "192.0.2.2/24", nil)
			n.addr(t, "ipf1", "198.51.100.2/24", nil)
			n.addr(t, "ipf1", "2001:db8:1::2/64", nodad)
			tt.routes(t, n)

			got, err := n.nl.DefaultInterface()
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("DefaultInterface() error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("DefaultInterface() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInterface(t *testing.T) {
	n := newNS(t)
	n.veth(t, "ipf0", "ipf0p", false)

	got, err := n.nl.Interface("ipf0")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "ipf0" || got.Index != n.link(t, "ipf0").Attrs().Index || got.Flags&net.FlagUp == 0 {
		t.Errorf("Interface(ipf0) = %+v", got)
	}

	_, err = n.nl.Interface("eth9")
	var nsi *host.NoSuchInterfaceError
	if !errors.As(err, &nsi) {
		t.Fatalf("Interface(eth9) error = %v, want a *host.NoSuchInterfaceError", err)
	}
	if want := "no such interface on this host (have: ipf0, ipf0p, lo)"; err.Error() != want {
		t.Errorf("Interface(eth9) error = %q, want %q", err, want)
	}
	if nsi.Name != "eth9" {
		t.Errorf("Name = %q", nsi.Name)
	}
}

func TestNodeAddrs(t *testing.T) {
	n := newNS(t)
	// ipf0 has carrier; ipf1 has none, so its DAD never ends.
	n.veth(t, "ipf0", "ipf0p", true)
	n.veth(t, "ipf1", "ipf1p", false)

	// VIPs this node holds, added before its own addresses so that the
	// kernel lists them first.
	n.addr(t, "ipf0", "192.0.2.10/32", nil)
	n.addr(t, "ipf0", "192.0.2.11/24", nil)
	n.addr(t, "ipf0", "2001:db8::10/128", nodad)
	n.addr(t, "ipf0", "169.254.7.7/16", nil)
	n.addr(t, "ipf0", "192.0.2.2/24", nil)
	n.addr(t, "ipf0", "2001:db8::2/64", nodad)
	n.addr(t, "ipf0", "2001:db8::5/64", func(a *netlink.Addr) {
		nodad(a)
		a.PreferedLft, a.ValidLft = 0, 3600 // deprecated
	})
	n.addr(t, "ipf0", "2001:db8::10:1/128", nodad) // a VIP added after

	// The kernel lists IPv6 addresses newest first.
	n.addr(t, "ipf1", "2001:db8:1::7/64", nodad)
	n.addr(t, "ipf1", "2001:db8:1::6/64", nil) // tentative for good

	vips := addrs("192.0.2.10", "192.0.2.11", "2001:db8::10", "2001:db8::10:1")
	tests := []struct {
		iface          string
		vips           []netip.Addr
		wantV4, wantV6 netip.Addr
	}{
		{iface: "ipf0", vips: vips, wantV4: netip.MustParseAddr("192.0.2.2"), wantV6: netip.MustParseAddr("2001:db8::2")},
		{iface: "ipf1", vips: vips, wantV6: netip.MustParseAddr("2001:db8:1::7")},
		{iface: "ipf0p", vips: vips}, // only a link-local address
	}
	for _, tt := range tests {
		t.Run(tt.iface, func(t *testing.T) {
			v4, v6, err := n.nl.NodeAddrs(tt.iface, tt.vips)
			if err != nil {
				t.Fatal(err)
			}
			if v4 != tt.wantV4 || v6 != tt.wantV6 {
				t.Errorf("NodeAddrs(%s) = %v, %v; want %v, %v", tt.iface, v4, v6, tt.wantV4, tt.wantV6)
			}
		})
	}
	if _, _, err := n.nl.NodeAddrs("eth9", vips); err == nil {
		t.Error("NodeAddrs(eth9): no error")
	}
}

func TestReleaseVIPsNetlink(t *testing.T) {
	n := newNS(t)
	n.veth(t, "ipf0", "ipf0p", true)
	n.addr(t, "ipf0", "192.0.2.2/24", nil)
	n.addr(t, "ipf0", "2001:db8::2/64", nodad)
	vipPrefixes := prefixes(
		"192.0.2.10/32",                  // keepalived's
		"192.0.2.11/24",                  // by hand, a secondary of the node's subnet
		"198.51.100.10/24",               // by hand, the primary of its subnet
		"198.51.100.11/24",               // and its secondary
		"192.0.2.12/32", "192.0.2.12/24", // one VIP twice
		"2001:db8::10/128", // keepalived's
		"2001:db8::11/64",  // by hand
	)
	for _, p := range vipPrefixes {
		if err := n.nl.Add("ipf0", p); err != nil {
			t.Fatal(err)
		}
	}
	n.addr(t, "ipf0", "192.0.2.20/32", nil) // not a VIP of this configuration
	vips := addrs("192.0.2.10", "192.0.2.11", "198.51.100.10", "198.51.100.11", "192.0.2.12",
		"2001:db8::10", "2001:db8::11", "192.0.2.99", "2001:db8::99")

	held, err := host.HeldVIPs(n.nl, "ipf0", vips)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(vips[:7], held, cmpAddrs); diff != "" {
		t.Errorf("HeldVIPs before release (-want +got):\n%s", diff)
	}

	removed, err := host.ReleaseVIPs(n.nl, "ipf0", vips)
	if err != nil {
		t.Fatalf("ReleaseVIPs: %v", err)
	}
	sortPrefixes := func(ps []netip.Prefix) []netip.Prefix {
		ps = slices.Clone(ps)
		slices.SortFunc(ps, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
		return ps
	}
	if diff := cmp.Diff(sortPrefixes(vipPrefixes), sortPrefixes(removed), cmpPrefixes); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	left, err := n.nl.List("ipf0")
	if err != nil {
		t.Fatal(err)
	}
	var global []netip.Prefix
	for _, p := range left {
		if !p.Addr().IsLinkLocalUnicast() {
			global = append(global, p)
		}
	}
	if diff := cmp.Diff(sortPrefixes(prefixes("192.0.2.2/24", "192.0.2.20/32", "2001:db8::2/64")), sortPrefixes(global), cmpPrefixes); diff != "" {
		t.Errorf("left on ipf0 (-want +got):\n%s", diff)
	}

	again, err := host.ReleaseVIPs(n.nl, "ipf0", vips)
	if err != nil || len(again) != 0 {
		t.Errorf("second ReleaseVIPs = %v, %v; want nothing removed, no error", again, err)
	}
	held, err = host.HeldVIPs(n.nl, "ipf0", vips)
	if err != nil || len(held) != 0 {
		t.Errorf("HeldVIPs after release = %v, %v; want none", held, err)
	}
}

// TestNetlinkAddrs checks that the kernel behaves as the fake does.
func TestNetlinkAddrs(t *testing.T) {
	n := newNS(t)
	n.veth(t, "ipf0", "ipf0p", true)
	checkAddrsSemantics(t, n.nl, "ipf0")
}

// BenchmarkHeldVIPs measures the metrics scrape path: which of 254
// configured VIPs a veth holds, with all of them on it.
func BenchmarkHeldVIPs(b *testing.B) {
	n := newNS(b)
	n.veth(b, "ipf0", "ipf0p", true)
	n.addr(b, "ipf0", "192.0.2.2/24", nil)
	vips := make([]netip.Addr, 0, 254)
	for i := 1; i <= 254; i++ {
		v := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		vips = append(vips, v)
		if err := n.nl.Add("ipf0", netip.PrefixFrom(v, 32)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		held, err := host.HeldVIPs(n.nl, "ipf0", vips)
		if err != nil {
			b.Fatal(err)
		}
		if len(held) != len(vips) {
			b.Fatalf("held %d VIPs, want %d", len(held), len(vips))
		}
	}
}

// TestCurrentNamespace runs this test binary again inside a fresh namespace
// with `ip netns exec`, so that NewNetlink, which works on the current
// namespace, sees a known one.
func TestCurrentNamespace(t *testing.T) {
	if os.Getenv("IPFAILOVER_HOST_CHILD") == "1" {
		currentNamespaceChild(t)
		return
	}
	n := newNS(t)
	n.veth(t, "ipf0", "ipf0p", true)
	n.addr(t, "ipf0", "192.0.2.10/32", nil)
	n.addr(t, "ipf0", "192.0.2.2/24", nil)
	n.defaultRoute(t, "ipf0", "192.0.2.1", 0)

	cmd := exec.Command("ip", "netns", "exec", n.name, os.Args[0], "-test.run=^TestCurrentNamespace$", "-test.v")
	cmd.Env = append(os.Environ(), "IPFAILOVER_HOST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCurrentNamespace") {
		t.Fatalf("child in %s: %v\n%s", n.name, err, out)
	}
}

func currentNamespaceChild(t *testing.T) {
	nl, err := host.NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	iface, err := nl.DefaultInterface()
	if err != nil || iface != "ipf0" {
		t.Errorf("DefaultInterface() = %q, %v; want ipf0", iface, err)
	}
	if _, err := nl.Interface("ipf0"); err != nil {
		t.Errorf("Interface(ipf0): %v", err)
	}
	_, err = nl.Interface("eth9")
	if want := "no such interface on this host (have: ipf0, ipf0p, lo)"; err == nil || err.Error() != want {
		t.Errorf("Interface(eth9) error = %v, want %q", err, want)
	}
	v4, _, err := nl.NodeAddrs("ipf0", addrs("192.0.2.10"))
	if err != nil || v4 != netip.MustParseAddr("192.0.2.2") {
		t.Errorf("NodeAddrs(ipf0) = %v, %v; want 192.0.2.2", v4, err)
	}
}

// TestReleaseVIPsKeepsNodeAddress: a VIP added by hand before the node's
// own address in the same subnet is that subnet's primary, and the kernel
// deletes the node's address with it; ReleaseVIPs must leave the node its
// address.
func TestReleaseVIPsKeepsNodeAddress(t *testing.T) {
	n := newNS(t)
	n.veth(t, "ipf0", "ipf0p", false)          // no carrier: no IPv6 link-local address
	n.addr(t, "ipf0", "198.51.100.10/24", nil) // the VIP, primary
	n.addr(t, "ipf0", "198.51.100.2/24", nil)  // the node, secondary
	n.addr(t, "ipf0", "198.51.100.3/24", nil)  // another of the node's

	removed, err := host.ReleaseVIPs(n.nl, "ipf0", addrs("198.51.100.10"))
	if err != nil {
		t.Fatalf("ReleaseVIPs: %v", err)
	}
	if diff := cmp.Diff(prefixes("198.51.100.10/24"), removed, cmpPrefixes); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
	left, err := n.nl.List("ipf0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(prefixes("198.51.100.2/24", "198.51.100.3/24"), left, cmpPrefixes); diff != "" {
		t.Errorf("left on ipf0 (-want +got):\n%s", diff)
	}
}
