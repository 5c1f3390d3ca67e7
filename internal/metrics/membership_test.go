package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type membershipView struct{ s MembershipStatus }

func (m membershipView) MembershipStatus() MembershipStatus { return m.s }

type bridgeView struct {
	on   bool
	sent uint64
}

func (b bridgeView) Active() bool { return b.on }
func (b bridgeView) Sent() uint64 { return b.sent }

// TestMembershipMetrics: the peers by family, the last change, the pods in
// and out, the watch's health and the bridge, with the names the alert
// uses; they lint clean.
func TestMembershipMetrics(t *testing.T) {
	o := testOptions(newProcess(0), "")
	o.Membership = membershipView{MembershipStatus{
		Peers:      map[string]int{"ipv4": 2},
		LastChange: time.Unix(1700000000, 500000000),
		In:         3, Out: 1,
		WatchUp: false, WatchErrors: 4,
		AdvertInterval: time.Second, VRRPVersion: 3, VRRPv2Pods: 1,
	}}
	o.Bridge = bridgeView{on: true, sent: 12}
	s := newServer(t, o)
	names := []string{"ipfailover_advert_interval_seconds", "ipfailover_vrrp_version", "ipfailover_membership_vrrp2_pods", "ipfailover_membership_peers", "ipfailover_membership_last_change_timestamp_seconds", "ipfailover_membership_pods",
		"ipfailover_membership_watch_up", "ipfailover_membership_watch_errors_total", "ipfailover_multicast_bridge_active", "ipfailover_multicast_bridge_adverts_total"}
	want := `
# HELP ipfailover_advert_interval_seconds The VRRP advert interval keepalived runs with: OPENSHIFT_HA_ADVERT_INTERVAL, or the fast one. Pods at different intervals hear each other (VRRPv3).
# TYPE ipfailover_advert_interval_seconds gauge
ipfailover_advert_interval_seconds 1
# HELP ipfailover_membership_vrrp2_pods Other pods of the workload that speak VRRPv2 (an older image, publishing its address alone, or heard on the wire): no peers of keepalived; the multicast bridge relays this node's masters to them. ` + "`ipfailover peers`" + ` names them.
# TYPE ipfailover_membership_vrrp2_pods gauge
ipfailover_membership_vrrp2_pods 1
# HELP ipfailover_membership_last_change_timestamp_seconds When keepalived last got other unicast peers (0: not since the start).
# TYPE ipfailover_membership_last_change_timestamp_seconds gauge
ipfailover_membership_last_change_timestamp_seconds 1.7000000005e+09
# HELP ipfailover_membership_peers Unicast peers keepalived runs with, by address family: the other pods of the workload that publish an address, and for a minute those of pods that went (held, so that one coming back costs no reload).
# TYPE ipfailover_membership_peers gauge
ipfailover_membership_peers{family="ipv4"} 2
# HELP ipfailover_membership_pods The workload's pods the watch sees: in (peers, or this pod), out (no address published: starting, or speaking multicast).
# TYPE ipfailover_membership_pods gauge
ipfailover_membership_pods{state="in"} 3
ipfailover_membership_pods{state="out"} 1
# HELP ipfailover_membership_watch_errors_total Failed requests to the API server (lists, watches, reading or annotating this pod).
# TYPE ipfailover_membership_watch_errors_total counter
ipfailover_membership_watch_errors_total 4
# HELP ipfailover_membership_watch_up 1 while the API server answers the watch of the workload's pods; 0 while it does not, and keepalived keeps its last peers.
# TYPE ipfailover_membership_watch_up gauge
ipfailover_membership_watch_up 0
# HELP ipfailover_multicast_bridge_active 1 while this node relays the adverts of the instances it is master of to nodes that do not hear its keepalived: nodes that speak multicast VRRP, or pods that speak VRRPv2 (during a migration).
# TYPE ipfailover_multicast_bridge_active gauge
ipfailover_multicast_bridge_active 1
# HELP ipfailover_multicast_bridge_adverts_total Adverts the multicast bridge sent.
# TYPE ipfailover_multicast_bridge_adverts_total counter
ipfailover_multicast_bridge_adverts_total 12
# HELP ipfailover_vrrp_version The VRRP version keepalived speaks for IPv4 (IPv6 is always 3): 3 with the peers from the pods. Pods of one workload at different versions do not hear each other.
# TYPE ipfailover_vrrp_version gauge
ipfailover_vrrp_version 3
`
	if err := testutil.GatherAndCompare(s.registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(s.registry, names...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
