package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func nodeAt(last int) Node {
	return Node{Interface: "eth0", Addr4: netip.AddrFrom4([4]byte{192, 0, 2, byte(last)})}
}

func mustParse(t *testing.T, r Raw) *Config {
	t.Helper()
	c, err := Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestUnicastPrioritiesSpreadAndDistinct: with peers known, every group has
// exactly one preferred node, the nodes' priorities for a group are all
// different, and masters spread evenly.
func TestUnicastPrioritiesSpreadAndDistinct(t *testing.T) {
	peers := "192.0.2.11,192.0.2.12,192.0.2.13"
	c := mustParse(t, Raw{VirtualIPs: "198.51.100.1-254", Offset: "0", UnicastPeers: peers})
	perNode := map[int][]Instance{}
	for _, last := range []int{11, 12, 13} {
		ins, err := c.Instances(nodeAt(last))
		if err != nil {
			t.Fatal(err)
		}
		perNode[last] = ins
		for _, in := range ins {
			if strings.Contains(fmt.Sprint(in.UnicastPeers), fmt.Sprintf("192.0.2.%d ", last)) || in.UnicastSource != nodeAt(last).Addr4 {
				t.Fatalf("node .%d: source %s peers %v: own address must be the source and not a peer", last, in.UnicastSource, in.UnicastPeers)
			}
			if len(in.UnicastPeers) != 2 {
				t.Fatalf("node .%d: peers %v, want the two others", last, in.UnicastPeers)
			}
		}
	}
	masters := map[int]int{}
	for i := range c.Groups {
		seen := map[int]bool{}
		preferred := 0
		for last, ins := range perNode {
			in := ins[i]
			if in.Priority < 1 || in.Priority > 254 {
				t.Fatalf("priority %d out of 1..254", in.Priority)
			}
			if seen[in.Priority] {
				t.Fatalf("group %d: two nodes with priority %d", in.Index, in.Priority)
			}
			seen[in.Priority] = true
			if in.Preferred {
				preferred++
				masters[last]++
				if in.Priority != 254 || !in.Master {
					t.Errorf("group %d: preferred node .%d has priority %d master %v", in.Index, last, in.Priority, in.Master)
				}
			} else if in.Priority < 250 {
				t.Errorf("group %d: backup priority %d is low: slow handover", in.Index, in.Priority)
			}
		}
		if preferred != 1 {
			t.Fatalf("group %d: %d preferred nodes, want 1", i+1, preferred)
		}
	}
	for last, n := range masters {
		if n < 84 || n > 85 {
			t.Errorf("node .%d is preferred for %d of 254 groups, want 84 or 85", last, n)
		}
	}
}

func TestMulticastPriorities(t *testing.T) {
	c := mustParse(t, Raw{VirtualIPs: "198.51.100.1-254", Offset: "0", ReplicaCount: "3"})
	for last := 0; last <= 255; last++ {
		a, err := c.Instances(nodeAt(last))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := c.Instances(nodeAt(last))
		slot := last % 128
		idx := slot%3 + 1
		for i, in := range a {
			if in.Priority < 1 || in.Priority > 254 {
				t.Fatalf("node .%d group %d: priority %d out of 1..254", last, in.Index, in.Priority)
			}
			if in.Priority != b[i].Priority {
				t.Fatalf("node .%d: priorities not deterministic", last)
			}
			if want := in.Index%idx == 0; in.Preferred != want || in.Master != want {
				t.Fatalf("node .%d group %d: preferred %v master %v, the shipped rule says %v", last, in.Index, in.Preferred, in.Master, want)
			}
			if in.Preferred && in.Priority < 248 || !in.Preferred && (in.Priority < 241 || in.Priority > 247) {
				t.Fatalf("node .%d group %d: priority %d outside its band (preferred %v)", last, in.Index, in.Priority, in.Preferred)
			}
		}
	}
	// .5 and .133 share the shipped image's slot; they must not share
	// priorities.
	five, _ := c.Instances(nodeAt(5))
	other, _ := c.Instances(nodeAt(133))
	if five[0].Priority == other[0].Priority {
		t.Errorf(".5 and .133 both get priority %d", five[0].Priority)
	}
}

func TestIPv6OnlyNodeHasPriorities(t *testing.T) {
	c := mustParse(t, Raw{VirtualIPs: "2001:db8::100-102"})
	ins, err := c.Instances(Node{Interface: "eth0", Addr6: netip.MustParseAddr("2001:db8::1f")})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		if in.Priority < 241 || in.Priority > 254 {
			t.Errorf("%s: priority %d", in.Name, in.Priority)
		}
	}
}

func TestNoPreemptNeverStartsMaster(t *testing.T) {
	for _, r := range []Raw{
		{VirtualIPs: "192.0.2.1-9", Preemption: "nopreempt"},
		{VirtualIPs: "192.0.2.1-9", Preemption: "nopreempt", UnicastPeers: "192.0.2.11,192.0.2.12"},
	} {
		c := mustParse(t, r)
		for last := 1; last < 255; last++ {
			ins, err := c.Instances(nodeAt(last))
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range ins {
				if in.Master {
					t.Fatalf("node .%d %s: state MASTER with nopreempt", last, in.Name)
				}
			}
		}
	}
}

func TestInstancesNeedAnAddressForUnicast(t *testing.T) {
	c := mustParse(t, Raw{VirtualIPs: "2001:db8::1", UnicastPeers: "2001:db8::11"})
	_, err := c.Instances(nodeAt(11))
	if err == nil || !strings.Contains(err.Error(), "no IPv6 address") {
		t.Errorf("got %v, want an error about the missing IPv6 address", err)
	}
}

// TestMembersFromPods: with PeersFromPods the members come from the node
// (what the other pods publish), rank as static peers do, never include the
// node itself, and a pod alone lists NoPeer so keepalived keeps a unicast
// instance.
func TestMembersFromPods(t *testing.T) {
	c := mustParse(t, Raw{VirtualIPs: "192.0.2.100-102,2001:db8::100", PeersFrom: "pods"})
	static := mustParse(t, Raw{VirtualIPs: "192.0.2.100-102,2001:db8::100", UnicastPeers: "192.0.2.11,192.0.2.12,192.0.2.13,2001:db8::11,2001:db8::12,2001:db8::13"})
	node := Node{Interface: "eth0", Addr4: netip.MustParseAddr("192.0.2.12"), Addr6: netip.MustParseAddr("2001:db8::12")}
	if got := fmt.Sprint(c.SourceAddrs(node)); got != "[192.0.2.12 2001:db8::12]" {
		t.Errorf("SourceAddrs = %s", got)
	}
	withMembers := node
	withMembers.Members = addrs("192.0.2.13", "192.0.2.12", "2001:db8::11", "192.0.2.11", "2001:db8::13", "192.0.2.11")
	fromPods, err := c.Instances(withMembers)
	if err != nil {
		t.Fatal(err)
	}
	fromList, err := static.Instances(node)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fromPods {
		p, l := fromPods[i], fromList[i]
		if !p.FollowsPods || l.FollowsPods {
			t.Errorf("%s: FollowsPods %v from pods, %v from the list", p.Name, p.FollowsPods, l.FollowsPods)
		}
		if p.Priority != l.Priority || p.Master != l.Master || fmt.Sprint(p.UnicastPeers) != fmt.Sprint(l.UnicastPeers) || p.UnicastSource != l.UnicastSource {
			t.Errorf("%s: from pods priority %d master %v peers %v source %s; from the list %d %v %v %s",
				p.Name, p.Priority, p.Master, p.UnicastPeers, p.UnicastSource, l.Priority, l.Master, l.UnicastPeers, l.UnicastSource)
		}
	}

	alone, err := c.Instances(node)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range alone {
		want := NoPeer(in.Is6())
		if len(in.UnicastPeers) != 1 || in.UnicastPeers[0] != want || !in.Preferred || in.Priority != 254 {
			t.Errorf("%s alone: peers %v preferred %v priority %d, want [%s], preferred at 254", in.Name, in.UnicastPeers, in.Preferred, in.Priority, want)
		}
	}

	explicit := mustParse(t, Raw{VirtualIPs: "192.0.2.100", PeersFrom: "pods", UnicastSource: "192.0.2.99"})
	if got := fmt.Sprint(explicit.SourceAddrs(node)); got != "[192.0.2.99]" {
		t.Errorf("SourceAddrs with UNICAST_SOURCE_IPADDRESS = %s", got)
	}
}
