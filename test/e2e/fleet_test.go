package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/shipped"
)

// TestRemoveFailover: after a fleet was killed (VIPs and rules left behind)
// or stopped, remove-failover with the same environment leaves no VRRP
// rule and no VIP on any node, and a second run succeeds too.
func TestRemoveFailover(t *testing.T) {
	s := newScenario(t)
	environ := env(vips4Env+","+vips6Env, "OPENSHIFT_HA_IPTABLES_CHAIN=INPUT")
	f := s.fleet(environ, allVIPs)
	holder := f.Holders[vips4[0]]

	// SIGKILL takes the whole PID namespace: keepalived gets no chance to
	// release anything, the VIPs stay on the holder.
	if err := f.Proc(holder).Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Proc(holder).Wait(s.ctx); err != nil {
		t.Fatal(err)
	}
	if len(held(t, holder, allVIPs)) == 0 {
		t.Fatalf("%s lost its VIPs on SIGKILL; nothing left to remove", holder.Name)
	}
	for _, n := range others(s.c, holder) {
		s.stop(f.Proc(n))
	}

	for _, n := range s.c.Nodes {
		for run := 1; run <= 2; run++ {
			out := s.output(fmt.Sprintf("remove-failover %s run %d", n.Name, run))
			p, err := n.Start(s.ctx, []string{ipfailoverBin, "remove-failover"}, environ, out)
			if err != nil {
				t.Fatal(err)
			}
			code, err := p.Wait(s.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if code != 0 {
				t.Errorf("remove-failover on %s, run %d: exit %d\n%s", n.Name, run, code, out)
			}
		}
		if left := held(t, n, allVIPs); len(left) > 0 {
			t.Errorf("%s still has %v after remove-failover", n.Name, left)
		}
		if r := inputRules(s.ctx, t, n, "iptables", "224.0.0.18"); len(r) > 0 {
			t.Errorf("%s INPUT still has %q", n.Name, r)
		}
		if r := inputRules(s.ctx, t, n, "ip6tables", "ff02::12"); len(r) > 0 {
			t.Errorf("%s ip6tables INPUT still has %q", n.Name, r)
		}
		if a := held(t, n, []netip.Addr{n.Addr4, n.Addr6}); len(a) != 2 {
			t.Errorf("%s lost its own addresses: has %v", n.Name, a)
		}
	}
}

// TestUnicast: with every node listed in OPENSHIFT_HA_UNICAST_PEERS (its
// own address included) and multicast VRRP dropped by the bridge, there is
// one holder per VIP and a SIGTERM hands over.
func TestUnicast(t *testing.T) {
	s := newScenario(t)
	// The bridge forwards no multicast VRRP: only unicast can elect.
	if out, err := s.c.BridgeExec(s.ctx, "nft",
		"add table bridge novrrp; "+
			"add chain bridge novrrp vrrp { type filter hook forward priority 0; }; "+
			"add rule bridge novrrp vrrp ip daddr 224.0.0.18 drop"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var peers []string
	for _, n := range s.c.Nodes {
		peers = append(peers, n.Addr4.String())
	}
	f := s.fleet(env(vips4Env, "OPENSHIFT_HA_UNICAST_PEERS="+strings.Join(peers, ",")), vips4)
	for _, p := range f.Procs {
		conf, err := p.ReadFile("/etc/keepalived/keepalived.conf")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(conf), "unicast_peer") {
			t.Errorf("%s: keepalived.conf has no unicast_peer:\n%s", p.Node().Name, conf)
		}
	}

	vip := vips4[0]
	victim := f.Holders[vip]
	s.stop(f.Proc(victim))
	m := s.waitOne(vips4, func(m lab.HolderMap) bool { return !m.Holds(victim) })
	t.Logf("unicast handover from %s: %s", victim.Name, m)
}

// TestMixedFleet: two nodes run ipfailover, the third plain keepalived with
// the shipped image's configuration (a rolling update half done). They
// elect one holder per VIP, and VIPs move both ways: from ipfailover nodes
// to the old one on SIGTERM, from the old one to ipfailover nodes on a crash.
func TestMixedFleet(t *testing.T) {
	s := newScenario(t)
	vips := vips4[:2]
	environ := env("192.0.2.100-101")
	old := s.c.Nodes[2]

	rendered := s.output("ipfailover render on node1")
	rp, err := s.c.Nodes[0].Start(s.ctx, []string{ipfailoverBin, "render"}, environ, rendered)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := rp.Wait(s.ctx); err != nil || code != 0 {
		t.Fatalf("ipfailover render: %d %v\n%s", code, err, rendered)
	}
	t.Logf("node1 renders:\n%s", rendered)

	oldOut := s.output("shipped keepalived on " + old.Name)
	// The shipped generator's random part of VIP_1's priority, fixed.
	conf := shipped.Conf(shipped.Options{VIPs: vips, Node: old.Addr4, MonitorPort: monitorPort, Random: func(int) int { return 17 }})
	kp, err := old.StartKeepalived(s.ctx, conf, oldOut)
	if err != nil {
		t.Fatal(err)
	}
	newNodes := s.c.Nodes[:2]
	f := s.fleet(environ, vips, newNodes...)
	if kp.Exited() {
		t.Fatalf("the shipped keepalived exited:\n%s", oldOut)
	}

	// ipfailover -> shipped: stop the ipfailover nodes one by one.
	for i, n := range newNodes {
		s.stop(f.Proc(n))
		stopped := newNodes[:i+1]
		m := s.waitOne(vips, func(m lab.HolderMap) bool {
			for _, h := range m {
				for _, st := range stopped {
					if h == st {
						return false
					}
				}
			}
			return true
		})
		t.Logf("after SIGTERM to %s: %s", n.Name, m)
	}
	s.waitOne(vips, func(m lab.HolderMap) bool { return m[vips[0]] == old && m[vips[1]] == old })

	// shipped -> ipfailover: restart the ipfailover nodes, wait until both
	// run a keepalived that has chosen a state, crash the old node.
	for _, n := range newNodes {
		p, out := s.start(n, environ)
		s.waitFor("keepalived state on "+n.Name, func() (bool, error) {
			if p.Exited() {
				return false, fmt.Errorf("ipfailover on %s exited", n.Name)
			}
			o := out.String()
			return strings.Contains(o, "Entering BACKUP STATE") || strings.Contains(o, "Entering MASTER STATE"), nil
		})
	}
	m := s.waitOne(vips, nil)
	t.Logf("with both ipfailover nodes back: %s", m)
	if err := old.Crash(); err != nil {
		t.Fatal(err)
	}
	m = s.waitOne(vips, nil) // a crashed node holds nothing
	t.Logf("after %s crashed: %s", old.Name, m)
}
