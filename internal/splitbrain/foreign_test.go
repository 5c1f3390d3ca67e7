package splitbrain

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host/hosttest"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// testPlan plans r on a fake node with eth0 at 192.0.2.11/24 and
// 2001:db8::11/64.
func testPlan(t testing.TB, r config.Raw) *plan.Plan {
	t.Helper()
	return testPlanOn(t, r, "192.0.2.11/24")
}

// testPlanOn plans r on a fake node with eth0 at addr4 and 2001:db8::11/64.
func testPlanOn(t testing.TB, r config.Raw, addr4 string) *plan.Plan {
	t.Helper()
	return testPlanWith(t, r, addr4)
}

// testPlanWith plans r on a fake node with eth0 at addr4 and
// 2001:db8::11/64, members being what the other pods publish (with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods).
func testPlanWith(t testing.TB, r config.Raw, addr4 string, members ...string) *plan.Plan {
	t.Helper()
	if r.MonitorPort == "" {
		r.MonitorPort = "0"
	}
	c, err := config.Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	h := hosttest.New(map[string][]netip.Prefix{"eth0": {
		netip.MustParsePrefix(addr4), netip.MustParsePrefix("2001:db8::11/64"),
	}})
	h.Default = "eth0"
	var ms []netip.Addr
	for _, m := range members {
		ms = append(ms, netip.MustParseAddr(m))
	}
	p, err := plan.New(c, h, plan.Fleet{Members: ms})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExpectations(t *testing.T) {
	var openShif, ab [8]byte
	copy(openShif[:], "OpenShif")
	copy(ab[:], "ab")
	tests := []struct {
		name string
		raw  config.Raw
		want map[key]string
	}{
		{"defaults: VRRPv2 for IPv4 with the config name's 8 first bytes, v3 for IPv6",
			config.Raw{VirtualIPs: "192.0.2.100-101,2001:db8::100"},
			map[key]string{
				{false, 11}: "X_VIP_1 v2 auth=OpenShif vips=[192.0.2.100] peers=any",
				{false, 12}: "X_VIP_2 v2 auth=OpenShif vips=[192.0.2.101] peers=any",
				{true, 13}:  "X_VIP_3 v3 auth=OpenShif vips=[2001:db8::100] peers=any",
			}},
		{"groups, a short name and unicast",
			config.Raw{ConfigName: "ab", VirtualIPs: "192.0.2.102,192.0.2.100-101", VIPGroups: "1", Offset: "50", UnicastPeers: "192.0.2.11,192.0.2.13,192.0.2.12"},
			map[key]string{
				{false, 51}: "ab_VIP_1 v2 auth=ab vips=[192.0.2.100 192.0.2.101 192.0.2.102] peers=[192.0.2.12 192.0.2.13]",
			}},
		{"a fractional advert interval: VRRPv3 for IPv4",
			config.Raw{VirtualIPs: "192.0.2.100", AdvertInterval: "0.1"},
			map[key]string{
				{false, 11}: "X_VIP_1 v3 auth=OpenShif vips=[192.0.2.100] peers=any",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPlan(t, tt.raw)
			got := expectations(p)
			if len(got) != len(tt.want) {
				t.Errorf("%d expectations, want %d: %+v", len(got), len(tt.want), got)
			}
			for k, w := range tt.want {
				e, ok := got[k]
				if !ok {
					t.Errorf("no expectation for %+v", k)
					continue
				}
				peers := "any"
				if e.peers != nil {
					peers = addrList(e.peers)
				}
				s := fmt.Sprintf("%s v%d auth=%s vips=%s peers=%s", e.instance, e.version, strings.TrimRight(string(e.auth[:]), "\x00"), addrList(e.vips), peers)
				s = strings.Replace(s, "OpenShift_IPFailover", "X", 1)
				if s != w {
					t.Errorf("%+v:\n got %s\nwant %s", k, s, w)
				}
			}
		})
	}
}

func TestDifferences(t *testing.T) {
	var pass, other [8]byte
	copy(pass[:], "OpenShif")
	copy(other[:], "secret")
	multicast := expectation{instance: "X_VIP_1", version: 2, auth: pass, vips: addrs("192.0.2.100", "192.0.2.101")}
	unicast := multicast
	unicast.peers = addrs("192.0.2.12", "192.0.2.13")
	peer := netip.MustParseAddr("192.0.2.12")
	stranger := netip.MustParseAddr("192.0.2.99")
	ours := advert{version: 2, vrid: 11, priority: 100, authType: 1, auth: pass, addrs: addrs("192.0.2.101", "192.0.2.100")}
	change := func(f func(*advert)) advert {
		a := ours
		a.addrs = append([]netip.Addr(nil), ours.addrs...)
		f(&a)
		return a
	}
	tests := []struct {
		name string
		e    expectation
		a    advert
		src  netip.Addr
		want []string
	}{
		{"a member, VIPs in another order", multicast, ours, stranger, nil},
		{"a unicast peer", unicast, ours, peer, nil},
		{"another password", multicast, change(func(a *advert) { a.auth = other }), peer, []string{"another authentication password"}},
		{"no authentication", multicast, change(func(a *advert) { a.authType = 0 }), peer, []string{"authentication type 0"}},
		{"another version", multicast, change(func(a *advert) { a.version = 3; a.authType = 0; a.auth = [8]byte{} }), peer, []string{"VRRP version 3 where this deployment speaks 2"}},
		{"version 4", unicast, change(func(a *advert) { a.version = 4 }), peer, []string{"VRRP version 4 where this deployment speaks 2"}},
		{"another VIP set", multicast, change(func(a *advert) { a.addrs = addrs("192.0.2.100") }), peer, []string{"VIPs [192.0.2.100] where this deployment has [192.0.2.100 192.0.2.101]"}},
		{"not a unicast peer", unicast, ours, stranger, []string{"not one of OPENSHIFT_HA_UNICAST_PEERS"}},
		{"everything", unicast, change(func(a *advert) { a.auth = other; a.addrs = addrs("198.51.100.1") }), stranger,
			[]string{"password", "VIPs [198.51.100.1]", "UNICAST_PEERS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.e.differences(tt.a, tt.src)
			if len(got) != len(tt.want) {
				t.Fatalf("differences = %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("difference %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestForeignCounts(t *testing.T) {
	f := newForeign()
	a := netip.MustParseAddr("192.0.2.99")
	if !f.add(11, a) {
		t.Error("the first advert from a source is not reported as new")
	}
	if f.add(11, a) || f.add(12, a) {
		t.Error("a known source reported as new again")
	}
	// Past the series limit, new sources count as "other", reported once.
	reported := 0
	for i := range maxForeignSeries + 10 {
		if f.add(11, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})) {
			reported++
		}
	}
	got := f.snapshot()
	if len(got) != maxForeignSeries+1 {
		t.Errorf("%d series, want %d and one %q", len(got), maxForeignSeries, otherSource)
	}
	var total, others uint64
	for _, s := range got {
		total += s.Adverts
		if s.Source == otherSource {
			others += s.Adverts
		}
	}
	if total != uint64(3+maxForeignSeries+10) {
		t.Errorf("%d adverts counted, want %d", total, 3+maxForeignSeries+10)
	}
	if others != 12 {
		t.Errorf("%d adverts under %q, want 12", others, otherSource)
	}
	if reported != maxForeignSeries-1+1 {
		t.Errorf("%d new sources reported, want %d and one for the rest", reported, maxForeignSeries-1)
	}
	if got[0].VRID != 11 || got[len(got)-1].VRID != 12 {
		t.Errorf("snapshot not sorted by router id: first %+v, last %+v", got[0], got[len(got)-1])
	}
}

// TestMember: an advert keepalived does not hear is a member's when its
// source is a peer, a VRRPv2 pod of the workload or a departed peer, and
// it carries this deployment's VIPs and, for VRRPv2, its password.
func TestMember(t *testing.T) {
	var pass, other [8]byte
	copy(pass[:], "OpenShif")
	copy(other[:], "secret")
	e := expectation{instance: "X_VIP_1", version: 3, auth: pass, vips: addrs("192.0.2.100", "192.0.2.101"),
		peers: addrs("192.0.2.12"), vrrp2: addrs("192.0.2.14")}
	v2 := advert{version: 2, vrid: 11, priority: 100, authType: 1, auth: pass, interval: time.Second, addrs: addrs("192.0.2.101", "192.0.2.100")}
	v3 := advert{version: 3, vrid: 11, priority: 100, interval: 500 * time.Millisecond, addrs: addrs("192.0.2.100", "192.0.2.101")}
	otherPass := v2
	otherPass.auth = other
	otherVIPs := v3
	otherVIPs.addrs = addrs("192.0.2.100")
	peer, vrrp2, stranger := netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.14"), netip.MustParseAddr("192.0.2.99")
	for _, tt := range []struct {
		name     string
		e        expectation
		a        advert
		src      netip.Addr
		departed bool
		want     bool
	}{
		{"a peer speaking VRRPv2", e, v2, peer, false, true},
		{"a VRRPv2 pod", e, v2, vrrp2, false, true},
		{"a VRRPv2 pod speaking VRRPv3", e, v3, vrrp2, false, true},
		{"a departed peer", e, v2, stranger, true, true},
		{"a stranger", e, v2, stranger, false, false},
		{"another password", e, otherPass, peer, false, false},
		{"other VIPs", e, otherVIPs, vrrp2, false, false},
		{"multicast: no members", expectation{instance: "X_VIP_1", version: 2, auth: pass, vips: e.vips}, v3, peer, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.member(tt.a, tt.src, tt.departed); got != tt.want {
				t.Errorf("member = %v, want %v", got, tt.want)
			}
		})
	}
}
