package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// Node holds the facts about this node that the instances depend on. The
// caller finds them on the host; Instances stays pure.
type Node struct {
	// Interface carries VRRP and the VIPs.
	Interface string
	// Addr4 and Addr6 are the node's own addresses on Interface (not VIPs);
	// either may be the zero Addr.
	Addr4, Addr6 netip.Addr
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
	self := node.Addr4
	family := "IPv4"
	if in.Is6() {
		self, family = node.Addr6, "IPv6"
	}
	if c.UnicastSource.IsValid() {
		self = c.UnicastSource
	}
	if !self.IsValid() {
		return fmt.Errorf("interface %s has no %s address of its own for the unicast %s instance %s", node.Interface, family, family, in.Name)
	}
	members := []netip.Addr{self}
	for _, p := range c.UnicastPeers {
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
	in.Preferred = distance == 0
	in.Priority = max(1, maxPriority-distance)
	return nil
}
