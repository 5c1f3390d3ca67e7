package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Membership is the unicast peers found in the cluster
// (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods).
type Membership interface {
	MembershipStatus() MembershipStatus
}

// MembershipStatus is what the membership metrics show.
type MembershipStatus struct {
	// Peers counts the peers keepalived runs with, by family: "ipv4",
	// "ipv6".
	Peers map[string]int
	// LastChange is when keepalived last got other peers; zero before the
	// first change after the start.
	LastChange time.Time
	// Pods counts the workload's pods the watch sees: In are peers (or this
	// pod), Out publish no usable address.
	In, Out int
	// WatchUp is false while the API server does not answer; WatchErrors
	// counts its failed requests.
	WatchUp     bool
	WatchErrors uint64
	// AdvertInterval is the advert interval keepalived runs with, and
	// VRRPVersion the VRRP version of its IPv4 instances.
	AdvertInterval time.Duration
	VRRPVersion    int
	// VRRPv2Pods counts the other pods that speak VRRPv2 (an older
	// image): no peers of keepalived, bridged.
	VRRPv2Pods int
}

// Bridge is the multicast bridge (relay.Relay).
type Bridge interface {
	// Active says whether it relays.
	Active() bool
	// Sent counts the adverts it sent.
	Sent() uint64
}

// membershipCollector exports MembershipStatus.
type membershipCollector struct {
	m                             Membership
	peers, change, pods, up, errs *prometheus.Desc
	interval, version, vrrp2      *prometheus.Desc
}

func newMembershipCollector(m Membership) *membershipCollector {
	return &membershipCollector{
		m: m,
		peers: prometheus.NewDesc("ipfailover_membership_peers",
			"Unicast peers keepalived runs with, by address family: the other pods of the workload that publish an address, and for a minute those of pods that went (held, so that one coming back costs no reload).",
			[]string{"family"}, nil),
		change: prometheus.NewDesc("ipfailover_membership_last_change_timestamp_seconds",
			"When keepalived last got other unicast peers (0: not since the start).", nil, nil),
		pods: prometheus.NewDesc("ipfailover_membership_pods",
			"The workload's pods the watch sees: in (peers, or this pod), out (no address published: starting, or speaking multicast).",
			[]string{"state"}, nil),
		up: prometheus.NewDesc("ipfailover_membership_watch_up",
			"1 while the API server answers the watch of the workload's pods; 0 while it does not, and keepalived keeps its last peers.", nil, nil),
		errs: prometheus.NewDesc("ipfailover_membership_watch_errors_total",
			"Failed requests to the API server (lists, watches, reading or annotating this pod).", nil, nil),
		interval: prometheus.NewDesc("ipfailover_advert_interval_seconds",
			"The VRRP advert interval keepalived runs with: OPENSHIFT_HA_ADVERT_INTERVAL, or the fast one. Pods at different intervals hear each other (VRRPv3).", nil, nil),
		version: prometheus.NewDesc("ipfailover_vrrp_version",
			"The VRRP version keepalived speaks for IPv4 (IPv6 is always 3): 3 with the peers from the pods. Pods of one workload at different versions do not hear each other.", nil, nil),
		vrrp2: prometheus.NewDesc("ipfailover_membership_vrrp2_pods",
			"Other pods of the workload that speak VRRPv2 (an older image, publishing its address alone, or heard on the wire): no peers of keepalived; the multicast bridge relays this node's masters to them. `ipfailover peers` names them.", nil, nil),
	}
}

func (c *membershipCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.peers, c.change, c.pods, c.up, c.errs, c.interval, c.version, c.vrrp2} {
		ch <- d
	}
}

func (c *membershipCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.MembershipStatus()
	for _, family := range []string{"ipv4", "ipv6"} {
		if n, ok := s.Peers[family]; ok {
			ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, float64(n), family)
		}
	}
	var change float64
	if !s.LastChange.IsZero() {
		change = float64(s.LastChange.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.change, prometheus.GaugeValue, change)
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(s.In), "in")
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(s.Out), "out")
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, boolValue(s.WatchUp))
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(s.WatchErrors))
	ch <- prometheus.MustNewConstMetric(c.interval, prometheus.GaugeValue, s.AdvertInterval.Seconds())
	ch <- prometheus.MustNewConstMetric(c.version, prometheus.GaugeValue, float64(s.VRRPVersion))
	ch <- prometheus.MustNewConstMetric(c.vrrp2, prometheus.GaugeValue, float64(s.VRRPv2Pods))
}

// bridgeCollector exports the multicast bridge's state.
type bridgeCollector struct {
	b            Bridge
	active, sent *prometheus.Desc
}

func newBridgeCollector(b Bridge) *bridgeCollector {
	return &bridgeCollector{
		b: b,
		active: prometheus.NewDesc("ipfailover_multicast_bridge_active",
			"1 while this node relays the adverts of the instances it is master of to nodes that do not hear its keepalived: nodes that speak multicast VRRP, or pods that speak VRRPv2 (during a migration).", nil, nil),
		sent: prometheus.NewDesc("ipfailover_multicast_bridge_adverts_total",
			"Adverts the multicast bridge sent.", nil, nil),
	}
}

func (c *bridgeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.active
	ch <- c.sent
}

func (c *bridgeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, boolValue(c.b.Active()))
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(c.b.Sent()))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
