package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// Node holds the facts the instances depend on that are found at run time:
// this node's interface and addresses, which the caller finds on the host,
// and with PeersFromPods the other members, which it finds in the cluster.
// Instances stays pure.
type Node struct {
	// Interface carries VRRP and the VIPs.
	Interface string
	// Addr4 and Addr6 are the node's own addresses on Interface (not VIPs);
	// either may be the zero Addr.
	Addr4, Addr6 netip.Addr
	// Members are, with PeersFromPods, the addresses the workload's other
	// pods that speak this node's VRRP publish (each one's SourceAddr);
	// nil otherwise.
	Members []netip.Addr
}

// SourceAddr is the address this node sends unicast VRRP from for the
// instances of one family: UNICAST_SOURCE_IPADDRESS when set, else the
// node's own address of that family (the zero Addr when it has none). It is
// also the address a pod publishes for the others to list, so that what a
// node sends from and what its peers accept can never differ.
func (c *Config) SourceAddr(node Node, v6 bool) netip.Addr {
	if c.UnicastSource.IsValid() && c.UnicastSource.Is6() == v6 {
		return c.UnicastSource
	}
	if v6 {
		return node.Addr6
	}
	return node.Addr4
}

// SourceAddrs are this node's SourceAddr for each family of the VIPs that
// it has one for: what a pod publishes with PeersFromPods.
func (c *Config) SourceAddrs(node Node) []netip.Addr {
	var out []netip.Addr
	for _, v6 := range []bool{false, true} {
		if !slices.ContainsFunc(c.VIPs, func(a netip.Addr) bool { return a.Is6() == v6 }) {
			continue
		}
		if a := c.SourceAddr(node, v6); a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// NoPeer stands in the unicast_peer list of a pod that is alone in its
// workload (PeersFromPods): keepalived sends its adverts to the unspecified
// address, which the kernel delivers to no one, and the instance stays a
// unicast one. An empty list would make keepalived fall back to multicast,
// or with unicast_fault_no_peer to FAULT, and the first peer to arrive
// would then recreate the instance (seconds without its VIPs).
func NoPeer(v6 bool) netip.Addr {
	if v6 {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

// Instance is one vrrp_instance as this node runs it.
type Instance struct {
	Group
	// Name is <scrubbed config name>_VIP_<n>, plus _v4/_v6 for a split part.
	Name      string
	Interface string
	// Priority is 1..254: 255 is reserved for the address owner.
	Priority int
	// Preferred says this node should be master of the instance.
	Preferred bool
	// Master is "state MASTER": preferred, and preemption allowed
	// (keepalived ignores nopreempt for an instance that starts as master).
	Master          bool
	MulticastSource netip.Addr
	UnicastSource   netip.Addr
	UnicastPeers    []netip.Addr
	// FollowsPods marks a unicast instance whose peers come from the pods
	// (PeersFromPods): it ignores adverts from outside its list and, should
	// the list ever be empty, goes to FAULT rather than to multicast.
	FollowsPods bool
}

// Alone says that a unicast instance has no peer but NoPeer: no other pod
// of the workload publishes an address.
func (in Instance) Alone() bool {
	return len(in.UnicastPeers) == 1 && in.UnicastPeers[0].IsUnspecified()
}

// Priority bands. Backups sit just under the preferred band, so that on a
// priority-0 handover the best backup's skew, (256-priority)/256 of the
// advert interval, is a few hundredths of a second, not most of it.
const (
	maxPriority = 254 // 255 is the address owner's
	// The bands' widths are odd so that addresses 128 apart (the shipped
	// image's slot collision, .5 and .133) still differ; within a band,
	// nodes whose last bytes differ by less than its width never tie.
	preferredBand     = 7 // preferred instances: 248..254
	backupBand        = 7 // other instances: 241..247: a best-backup skew of 35 ms at most
	topBackupPriority = maxPriority - preferredBand
)

// Instances computes the VRRP instances this node runs, with priorities.
//
// With unicast peers the node knows every member: it ranks the members by
// address and, for group n, the member at position (n-1) mod M is
// preferred (priority 254), the next one 253, and so on: a full, distinct
// order that rotates per group, so masters and failover targets spread
// evenly over the nodes.
//
// With multicast the node cannot know its peers. It keeps the shipped
// image's rule for which instances it prefers (slot = last octet mod 128,
// idx = slot mod REPLICA_COUNT + 1, preferred when n mod idx = 0) without
// its faults: priorities come from the whole last byte of the node's
// address (IPv6 too), never from a random number, and stay in 1..254.
// Preferred instances alternate between two orders of that byte on odd and
// even groups, which spreads masters between nodes that prefer the same
// groups; backups get 241..247, varying with the group. Equal priorities
// (last bytes a multiple of the band apart) fall back to VRRP's own rule:
// the higher address wins.
func (c *Config) Instances(node Node) ([]Instance, error) {
	if node.Interface == "" {
		return nil, fmt.Errorf("no interface for the VIPs")
	}
	key, ok := nodeKey(node)
	if !ok && !c.Unicast {
		return nil, fmt.Errorf("interface %s has no address of its own: the node needs one to rank itself", node.Interface)
	}
	slot := key % 128
	idx := slot%c.ReplicaCount + 1

	out := make([]Instance, 0, len(c.Groups))
	for _, g := range c.Groups {
		in := Instance{
			Group:     g,
			Name:      c.Scrubbed + "_VIP_" + strconv.Itoa(g.Index),
			Interface: node.Interface,
		}
		if g.Part != "" {
			in.Name += "_" + g.Part
		}
		if c.MulticastSource.IsValid() {
			in.MulticastSource = c.MulticastSource
		}
		if c.Unicast {
			if err := c.rankUnicast(&in, node); err != nil {
				return nil, err
			}
		} else {
			in.Preferred = g.Index%idx == 0
			in.Priority = multicastPriority(key, g.Index, in.Preferred)
		}
		in.Master = in.Preferred && !c.Preemption.Never
		out = append(out, in)
	}
	return out, nil
}

// nodeKey is the last byte of the node's IPv4 address, else of its IPv6
// address.
func nodeKey(n Node) (int, bool) {
	for _, a := range []netip.Addr{n.Addr4, n.Addr6} {
		if a.IsValid() {
			b := a.AsSlice()
			return int(b[len(b)-1]), true
		}
	}
	return 0, false
}

func multicastPriority(key, n int, preferred bool) int {
	if preferred {
		if n%2 == 1 {
			return maxPriority - key%preferredBand
		}
		return maxPriority - preferredBand + 1 + key%preferredBand
	}
	return topBackupPriority - (key+n)%backupBand
}

// rankUnicast sets the source, peers and priority of a unicast instance.
func (c *Config) rankUnicast(in *Instance, node Node) error {
	self := c.SourceAddr(node, in.Is6())
	family := "IPv4"
	if in.Is6() {
		family = "IPv6"
	}
	if !self.IsValid() {
		return fmt.Errorf("interface %s has no %s address of its own for the unicast %s instance %s", node.Interface, family, family, in.Name)
	}
	peers := c.UnicastPeers
	if c.PeersFromPods {
		peers = node.Members
	}
	members := []netip.Addr{self}
	for _, p := range peers {
		if p.Is6() == self.Is6() && !slices.Contains(members, p) {
			members = append(members, p)
		}
	}
	slices.SortFunc(members, netip.Addr.Compare)
	rank := slices.Index(members, self)
	m := len(members)
	distance := (rank - (in.Index-1)%m + m) % m
	in.UnicastSource = self
	in.UnicastPeers = slices.DeleteFunc(members, func(a netip.Addr) bool { return a == self })
	if c.PeersFromPods {
		in.FollowsPods = true
		if len(in.UnicastPeers) == 0 {
			in.UnicastPeers = []netip.Addr{NoPeer(in.Is6())}
		}
	}
	in.Preferred = distance == 0
	in.Priority = max(1, maxPriority-distance)
	return nil
}
