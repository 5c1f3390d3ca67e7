package metrics

import (
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipfailover/ipfailover/internal/splitbrain"
)

// SplitBrain is the split-brain guard (splitbrain.Guard): what it has seen
// so far.
type SplitBrain interface {
	Snapshot() splitbrain.Snapshot
}

// splitBrainCollector exports the guard's view:
// ipfailover_vip_duplicate, ipfailover_vip_stray_removed_total,
// ipfailover_vip_restored_total, ipfailover_vip_announcements_total,
// ipfailover_vrrp_foreign_adverts_total and ipfailover_peer_heard.
type splitBrainCollector struct {
	guard     SplitBrain
	vips      []netip.Addr
	dup       *prometheus.Desc
	stray     *prometheus.Desc
	restored  *prometheus.Desc
	announced *prometheus.Desc
	foreign   *prometheus.Desc
	heard     *prometheus.Desc
}

func newSplitBrainCollector(g SplitBrain, vips []netip.Addr) *splitBrainCollector {
	return &splitBrainCollector{
		guard: g,
		vips:  vips,
		dup: prometheus.NewDesc("ipfailover_vip_duplicate",
			"1 while another host (mac) answers ARP or neighbour solicitation for a VIP this node holds: the VIP is on two nodes. 0, with an empty mac, otherwise.",
			[]string{"vip", "mac"}, nil),
		stray: prometheus.NewDesc("ipfailover_vip_stray_removed_total",
			"VIPs removed from this node's interface because keepalived's instance for them was not MASTER here.",
			[]string{"vip"}, nil),
		restored: prometheus.NewDesc("ipfailover_vip_restored_total",
			"VIPs put back on this node's interface because keepalived's instance for them was MASTER here without them (keepalived adds an instance's VIPs once, as it becomes MASTER).",
			[]string{"vip"}, nil),
		announced: prometheus.NewDesc("ipfailover_vip_announcements_total",
			"Gratuitous ARPs or unsolicited neighbour advertisements this node sent for a VIP it holds after another host that had claimed it stopped answering for it (a split brain over), so that clients follow this node again.",
			[]string{"vip"}, nil),
		foreign: prometheus.NewDesc("ipfailover_vrrp_foreign_adverts_total",
			"VRRP adverts for one of this deployment's router ids from a speaker outside it (another VIP set, authentication or version, or a source that is not a unicast peer).",
			[]string{"vrid", "source"}, nil),
		heard: prometheus.NewDesc("ipfailover_peer_heard",
			"1 while this node hears a unicast peer's VRRP (its heartbeat every second), 0 once none arrived for 3 s: IP protocol 112 from that peer is dropped on the way, and a VIP it holds may be held here too. One series per peer that sends heartbeats (pods of this version on).",
			[]string{"peer"}, nil),
	}
}

func (c *splitBrainCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.dup
	ch <- c.stray
	ch <- c.restored
	ch <- c.announced
	ch <- c.foreign
	ch <- c.heard
}

func (c *splitBrainCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.guard.Snapshot()
	for _, v := range c.vips {
		vip := v.String()
		if macs := s.Duplicates[v]; len(macs) > 0 {
			for _, m := range macs {
				ch <- prometheus.MustNewConstMetric(c.dup, prometheus.GaugeValue, 1, vip, m.String())
			}
		} else {
			ch <- prometheus.MustNewConstMetric(c.dup, prometheus.GaugeValue, 0, vip, "")
		}
		ch <- prometheus.MustNewConstMetric(c.stray, prometheus.CounterValue, float64(s.StrayRemoved[v]), vip)
		ch <- prometheus.MustNewConstMetric(c.restored, prometheus.CounterValue, float64(s.Restored[v]), vip)
		ch <- prometheus.MustNewConstMetric(c.announced, prometheus.CounterValue, float64(s.Announced[v]), vip)
	}
	for _, f := range s.Foreign {
		ch <- prometheus.MustNewConstMetric(c.foreign, prometheus.CounterValue, float64(f.Adverts), strconv.Itoa(f.VRID), f.Source)
	}
	for _, p := range s.Peers {
		heard := 1.0
		if p.Silent {
			heard = 0
		}
		ch <- prometheus.MustNewConstMetric(c.heard, prometheus.GaugeValue, heard, p.Addr.String())
	}
}
