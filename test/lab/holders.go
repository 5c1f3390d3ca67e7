package lab

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// PollInterval is how often the Wait helpers look at the cluster.
const PollInterval = 50 * time.Millisecond

// Holders returns the nodes that hold vip: eth0 up and vip on it. A crashed
// node keeps its addresses but answers no ARP, so it holds nothing.
func (c *Cluster) Holders(vip netip.Addr) ([]*Node, error) {
	hs, err := c.HoldersOf([]netip.Addr{vip})
	return hs[vip], err
}

// HoldersOf returns, for each of vips, the nodes that hold it (eth0 up and
// the VIP on it), reading each node's addresses once.
func (c *Cluster) HoldersOf(vips []netip.Addr) (map[netip.Addr][]*Node, error) {
	hs := make(map[netip.Addr][]*Node, len(vips))
	for _, n := range c.Nodes {
		up, err := n.Up()
		if err != nil {
			return nil, err
		}
		if !up {
			continue
		}
		addrs, err := n.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if slices.Contains(vips, a.Addr()) && !slices.Contains(hs[a.Addr()], n) {
				hs[a.Addr()] = append(hs[a.Addr()], n)
			}
		}
	}
	return hs, nil
}

// Holder returns the single node holding vip, nil when none does, and an
// error when several do.
func (c *Cluster) Holder(vip netip.Addr) (*Node, error) {
	hs, err := c.Holders(vip)
	if err != nil {
		return nil, err
	}
	switch len(hs) {
	case 0:
		return nil, nil
	case 1:
		return hs[0], nil
	default:
		return nil, fmt.Errorf("%s held by %d nodes: %s", vip, len(hs), names(hs))
	}
}

func names(ns []*Node) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return strings.Join(s, ",")
}

// HolderMap is the holder of each VIP.
type HolderMap map[netip.Addr]*Node

// Holds reports whether n holds any of the VIPs.
func (m HolderMap) Holds(n *Node) bool {
	for _, h := range m {
		if h == n {
			return true
		}
	}
	return false
}

// String lists "vip=node" pairs in address order.
func (m HolderMap) String() string {
	vips := slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
	var s []string
	for _, v := range vips {
		name := "none"
		if m[v] != nil {
			name = m[v].Name
		}
		s = append(s, v.String()+"="+name)
	}
	return strings.Join(s, " ")
}

// WaitOneHolder polls until every VIP has exactly one holder and cond (nil:
// none) accepts the holders, or ctx ends. On timeout the error describes
// the last state seen.
func (c *Cluster) WaitOneHolder(ctx context.Context, vips []netip.Addr, cond func(HolderMap) bool) (HolderMap, error) {
	var last string
	for {
		m, state, err := c.holderMap(vips)
		if err != nil {
			return nil, err
		}
		if m != nil && (cond == nil || cond(m)) {
			return m, nil
		}
		if state != last {
			c.log.Debug("waiting for one holder per VIP", "state", state)
			last = state
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for one holder per VIP: %w; last seen: %s", ctx.Err(), last)
		case <-time.After(PollInterval):
		}
	}
}

// WaitStable waits, until ctx ends, for one holder per VIP that stays the
// same for quiet (a few advert intervals): startup preemption is over and
// the holders are the ones the VRRP priorities chose.
func (c *Cluster) WaitStable(ctx context.Context, vips []netip.Addr, quiet time.Duration) (HolderMap, error) {
	prev, err := c.WaitOneHolder(ctx, vips, nil)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for stable holders: %w; last seen: %s", ctx.Err(), prev)
		case <-time.After(quiet):
		}
		m, err := c.WaitOneHolder(ctx, vips, nil)
		if err != nil {
			return nil, err
		}
		if maps.Equal(m, prev) {
			return m, nil
		}
		prev = m
	}
}

// holderMap returns the holders when each VIP has exactly one, else nil,
// plus a description of the state.
func (c *Cluster) holderMap(vips []netip.Addr) (HolderMap, string, error) {
	all, err := c.HoldersOf(vips)
	if err != nil {
		return nil, "", err
	}
	m := HolderMap{}
	ok := true
	var desc []string
	for _, v := range vips {
		hs := all[v]
		desc = append(desc, fmt.Sprintf("%s=[%s]", v, names(hs)))
		if len(hs) != 1 {
			ok = false
			continue
		}
		m[v] = hs[0]
	}
	if !ok {
		m = nil
	}
	return m, strings.Join(desc, " "), nil
}
