package metrics

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipfailover/ipfailover/internal/splitbrain"
)

// guardView is a SplitBrain with a fixed snapshot.
type guardView struct{ s splitbrain.Snapshot }

func (g guardView) Snapshot() splitbrain.Snapshot { return g.s }

// TestSplitBrainMetrics: one ipfailover_vip_duplicate series per configured
// VIP (0 with an empty mac, or 1 per other host's MAC), a stray and a restored counter per
// configured VIP, and a foreign advert counter per router id and source;
// the names and labels the alerts use, and they lint clean.
func TestSplitBrainMetrics(t *testing.T) {
	o := testOptions(newProcess(0), "")
	mac1, _ := net.ParseMAC("02:00:00:00:00:0b")
	mac2, _ := net.ParseMAC("02:00:00:00:00:0c")
	o.SplitBrain = guardView{splitbrain.Snapshot{
		Duplicates: map[netip.Addr][]net.HardwareAddr{netip.MustParseAddr("192.0.2.101"): {mac1, mac2}},
		StrayRemoved: map[netip.Addr]uint64{
			netip.MustParseAddr("192.0.2.100"): 2, netip.MustParseAddr("192.0.2.101"): 0, netip.MustParseAddr("2001:db8::1"): 0,
		},
		Restored:  map[netip.Addr]uint64{netip.MustParseAddr("2001:db8::1"): 1},
		Announced: map[netip.Addr]uint64{netip.MustParseAddr("192.0.2.101"): 3},
		Foreign:   []splitbrain.ForeignAdverts{{VRID: 51, Source: "192.0.2.99", Adverts: 7}, {VRID: 52, Source: "fe80::1", Adverts: 1}},
	}}
	s := newServer(t, o)
	want := `
# HELP ipfailover_vip_duplicate 1 while another host (mac) answers ARP or neighbour solicitation for a VIP this node holds: the VIP is on two nodes. 0, with an empty mac, otherwise.
# TYPE ipfailover_vip_duplicate gauge
ipfailover_vip_duplicate{mac="",vip="192.0.2.100"} 0
ipfailover_vip_duplicate{mac="02:00:00:00:00:0b",vip="192.0.2.101"} 1
ipfailover_vip_duplicate{mac="02:00:00:00:00:0c",vip="192.0.2.101"} 1
ipfailover_vip_duplicate{mac="",vip="2001:db8::1"} 0
# HELP ipfailover_vip_stray_removed_total VIPs removed from this node's interface because keepalived's instance for them was not MASTER here.
# TYPE ipfailover_vip_stray_removed_total counter
ipfailover_vip_stray_removed_total{vip="192.0.2.100"} 2
ipfailover_vip_stray_removed_total{vip="192.0.2.101"} 0
ipfailover_vip_stray_removed_total{vip="2001:db8::1"} 0
# HELP ipfailover_vip_restored_total VIPs put back on this node's interface because keepalived's instance for them was MASTER here without them (keepalived adds an instance's VIPs once, as it becomes MASTER).
# TYPE ipfailover_vip_restored_total counter
ipfailover_vip_restored_total{vip="192.0.2.100"} 0
ipfailover_vip_restored_total{vip="192.0.2.101"} 0
ipfailover_vip_restored_total{vip="2001:db8::1"} 1
# HELP ipfailover_vip_announcements_total Gratuitous ARPs or unsolicited neighbour advertisements this node sent for a VIP it holds after another host that had claimed it stopped answering for it (a split brain over), so that clients follow this node again.
# TYPE ipfailover_vip_announcements_total counter
ipfailover_vip_announcements_total{vip="192.0.2.100"} 0
ipfailover_vip_announcements_total{vip="192.0.2.101"} 3
ipfailover_vip_announcements_total{vip="2001:db8::1"} 0
# HELP ipfailover_vrrp_foreign_adverts_total VRRP adverts for one of this deployment's router ids from a speaker outside it (another VIP set, authentication or version, or a source that is not a unicast peer).
# TYPE ipfailover_vrrp_foreign_adverts_total counter
ipfailover_vrrp_foreign_adverts_total{source="192.0.2.99",vrid="51"} 7
ipfailover_vrrp_foreign_adverts_total{source="fe80::1",vrid="52"} 1
`
	if err := testutil.GatherAndCompare(s.registry, strings.NewReader(want),
		"ipfailover_vip_duplicate", "ipfailover_vip_stray_removed_total", "ipfailover_vip_restored_total", "ipfailover_vip_announcements_total", "ipfailover_vrrp_foreign_adverts_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(s.registry, "ipfailover_vip_duplicate", "ipfailover_vip_stray_removed_total", "ipfailover_vip_restored_total", "ipfailover_vip_announcements_total", "ipfailover_vrrp_foreign_adverts_total")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	// Without a guard the families are absent.
	s = newServer(t, testOptions(newProcess(0), ""))
	if n, err := testutil.GatherAndCount(s.registry, "ipfailover_vip_duplicate"); err != nil || n != 0 {
		t.Errorf("without a guard: %d ipfailover_vip_duplicate series, %v", n, err)
	}
}
