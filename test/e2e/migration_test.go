package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/shipped"
)

// TestMulticastBridge: two nodes still run keepalived with the shipped
// image's multicast configuration, the third runs ipfailover with unicast
// peers and the multicast bridge (a migration a third done). keepalived's
// unicast instances never hear the multicast nodes, and the multicast
// instances refuse unicast adverts; the bridge's priority-255 adverts make
// the multicast masters give their VIPs to the unicast node, which then
// holds every VIP alone. When it stops, the multicast nodes take them back.
func TestMulticastBridge(t *testing.T) {
	s := newScenario(t)
	unicast := s.c.Nodes[2]
	multicast := s.c.Nodes[:2]
	var outs []*lab.Output
	for _, n := range multicast {
		out := s.output("shipped keepalived " + n.Name)
		conf := shipped.Conf(shipped.Options{VIPs: vips4, Node: n.Addr4, MonitorPort: monitorPort, ReplicaCount: 3})
		if _, err := n.StartKeepalived(s.ctx, conf, out); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	m := s.waitOne(vips4, func(m lab.HolderMap) bool { return !m.Holds(unicast) })
	t.Logf("the multicast nodes elected: %s", m)

	var peers []string
	for _, n := range s.c.Nodes {
		peers = append(peers, n.Addr4.String())
	}
	p, _ := s.start(unicast, env(vips4Env, "OPENSHIFT_HA_UNICAST_PEERS="+strings.Join(peers, ","), "OPENSHIFT_HA_MULTICAST_BRIDGE=true"))
	m = s.waitOne(vips4, func(m lab.HolderMap) bool {
		for _, v := range vips4 {
			if m[v] != unicast {
				return false
			}
		}
		return true
	})
	t.Logf("with the bridge: %s", m)
	yielded := 0
	for _, o := range outs {
		yielded += o.Count("with higher priority 255")
	}
	if yielded == 0 {
		t.Errorf("no multicast master says it heard the bridge's priority 255")
	}
	hc := s.c.HTTPClient()
	s.waitScrape(t, hc, unicast, func(m *scrape) error {
		if m.value("ipfailover_multicast_bridge_active", nil) != 1 || m.value("ipfailover_multicast_bridge_adverts_total", nil) == 0 {
			return fmt.Errorf("bridge active %v, adverts %v", m.value("ipfailover_multicast_bridge_active", nil), m.value("ipfailover_multicast_bridge_adverts_total", nil))
		}
		return nil
	})

	s.stop(p)
	m = s.waitOne(vips4, func(m lab.HolderMap) bool { return !m.Holds(unicast) })
	t.Logf("after the unicast node stopped: %s", m)
}
