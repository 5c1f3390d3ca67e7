package config

import (
	"fmt"
	"net/netip"
	"slices"
)

// Split spreads the VIPs over VRRP groups as the shipped image does: with
// V VIPs and G groups each group gets V/G VIPs in order and the first V%G
// groups one more; G of 0 means one group per VIP, and G larger than V
// gives V groups of one.
//
// keepalived refuses an instance that mixes IPv4 and IPv6 VIPs, which the
// shipped image writes. Such a group is split by family: the part of the
// family of its first VIP keeps the group's name, the other part is named
// with a "_v4" or "_v6" suffix. Both parts keep the group's number and so its
// router id: VRRP router ids are per address family, so an IPv4 and an IPv6
// instance with the same id never meet on the wire.
func Split(vips []netip.Addr, groups int) []Group {
	per, extra := 1, 0
	if groups > 0 {
		per, extra = len(vips)/groups, len(vips)%groups
	}
	var out []Group
	for i, n := 0, 1; i < len(vips); n++ {
		size := per
		if extra > 0 {
			size++
			extra--
		}
		chunk := vips[i : i+size]
		i += size
		first := Group{Index: n}
		var other Group
		for _, v := range chunk {
			if v.Is4() == chunk[0].Is4() {
				first.VIPs = append(first.VIPs, v)
			} else {
				other.VIPs = append(other.VIPs, v)
			}
		}
		out = append(out, first)
		if len(other.VIPs) > 0 {
			other.Index = n
			other.Part = "v4"
			if other.VIPs[0].Is6() {
				other.Part = "v6"
			}
			out = append(out, other)
		}
	}
	return out
}

// assignRouterIDs gives group n the id offset+n. An excluded id grows the
// offset by one until the id is free, and the grown offset stays for every
// later group: offset 50, excluded 52 53, five groups: 51 54 55 56 57.
func assignRouterIDs(groups []Group, offset int, excluded []RouterID) error {
	orig := offset
	ids := map[int]int{} // group number → id
	last := 0
	for _, g := range groups {
		if _, done := ids[g.Index]; done {
			continue
		}
		id := offset + g.Index
		for slices.Contains(excluded, RouterID(min(id, 255))) && id <= 255 {
			offset++
			id = offset + g.Index
		}
		ids[g.Index] = id
		last = g.Index
	}
	if len(groups) > 0 && ids[last] > 255 {
		fit := 0
		for n := 1; n <= last && ids[n] <= 255; n++ {
			fit = n
		}
		return fmt.Errorf("OPENSHIFT_HA_VRRP_ID_OFFSET=\"%d\": %d VRRP instances need router ids up to %d (excluded ids counted), but the largest is 255; "+
			"%d instances fit: set OPENSHIFT_HA_VIP_GROUPS=%d (or fewer) or lower OPENSHIFT_HA_VRRP_ID_OFFSET",
			orig, last, ids[last], fit, fit)
	}
	for i := range groups {
		groups[i].RouterID = RouterID(ids[groups[i].Index])
	}
	return nil
}
