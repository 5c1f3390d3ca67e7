package host

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// ifaceAddr is an address as the kernel lists it, with what node address
// selection needs to know about it.
type ifaceAddr struct {
	prefix netip.Prefix
	flags  int // IFA_F_*
	scope  int // RT_SCOPE_*
}

// Flags that rule an address out as the node's own. IFA_F_SECONDARY only
// means "secondary" for IPv4; for IPv6 the same bit is IFA_F_TEMPORARY.
const (
	skipV4Flags = unix.IFA_F_DEPRECATED | unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED
	skipV6Flags = unix.IFA_F_DEPRECATED | unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED
)

// pickNodeAddrs chooses the node's own IPv4 and IPv6 address among addrs, in
// the kernel's order: the first primary global-unicast IPv4 address (a
// secondary one only when every primary is a VIP or unusable) and the first
// global IPv6 address (a stable one before a temporary one), skipping
// link-local, deprecated, tentative and failed addresses and every address in
// vips. A family without such an address gives the zero Addr.
func pickNodeAddrs(addrs []ifaceAddr, vips map[netip.Addr]struct{}) (v4, v6 netip.Addr) {
	var secondary, temporary netip.Addr
	for _, a := range addrs {
		ip := a.prefix.Addr().Unmap()
		if _, ok := vips[ip]; ok {
			continue
		}
		if a.scope != unix.RT_SCOPE_UNIVERSE || !ip.IsGlobalUnicast() {
			continue
		}
		switch {
		case ip.Is4():
			if v4.IsValid() || a.flags&skipV4Flags != 0 {
				continue
			}
			if a.flags&unix.IFA_F_SECONDARY != 0 {
				if !secondary.IsValid() {
					secondary = ip
				}
				continue
			}
			v4 = ip
		case ip.Is6():
			if v6.IsValid() || a.flags&skipV6Flags != 0 {
				continue
			}
			if a.flags&unix.IFA_F_TEMPORARY != 0 {
				if !temporary.IsValid() {
					temporary = ip
				}
				continue
			}
			v6 = ip
		}
	}
	if !v4.IsValid() {
		v4 = secondary
	}
	if !v6.IsValid() {
		v6 = temporary
	}
	return v4, v6
}
