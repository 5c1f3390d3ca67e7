// Package host reads and changes the host's network state that ipfailover
// depends on: the interface VRRP runs on, the node's own addresses, the VIPs
// keepalived leaves on that interface, and the ip_vs kernel module.
//
// Address changes go through the small Addrs interface, with one netlink
// implementation (Netlink, which can work on any network namespace) and an
// in-memory fake in host/hosttest.
package host

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Lister lists the addresses of a network interface.
type Lister interface {
	// List returns the addresses on iface, each with its own prefix length,
	// in the order the kernel lists them.
	List(iface string) ([]netip.Prefix, error)
}

// Addrs lists, adds and deletes the addresses of a network interface.
type Addrs interface {
	Lister
	// Add puts p on iface. It fails with ErrAddrExists when p is there.
	Add(iface string, p netip.Prefix) error
	// Delete removes p, with exactly this prefix length, from iface. It fails
	// with ErrAddrNotFound when p is not there.
	Delete(iface string, p netip.Prefix) error
}

var (
	// ErrAddrExists is returned by Addrs.Add for an address already present.
	ErrAddrExists = errors.New("address already on the interface")
	// ErrAddrNotFound is returned by Addrs.Delete for an address not present.
	ErrAddrNotFound = errors.New("address not on the interface")
	// ErrNoDefaultRoute is returned by DefaultInterface when the main routing
	// table has neither an IPv4 nor an IPv6 default route.
	ErrNoDefaultRoute = errors.New("no IPv4 or IPv6 default route in the main routing table")
)

// NoSuchInterfaceError says that an interface does not exist and which ones
// do. Its message leaves the name out so that a caller can prefix it with the
// variable that named it:
//
//	OPENSHIFT_HA_NETWORK_INTERFACE="eth9": no such interface on this host (have: eth0, lo)
type NoSuchInterfaceError struct {
	Name string   // the interface asked for
	Have []string // the interfaces that exist, sorted
}

func (e *NoSuchInterfaceError) Error() string {
	return fmt.Sprintf("no such interface on this host (have: %s)", strings.Join(e.Have, ", "))
}

// ReleaseVIPs deletes from iface every address that is one of vips, each with
// the prefix length it is listed with (keepalived adds /32 and /128, a VIP
// added by hand may be a /24 or a /64), and returns the prefixes it deleted.
// A VIP that is not on the interface is not an error; every failed deletion
// is reported, joined. It serves the clean-up of VIPs a killed run left
// behind, the release at SIGTERM and remove-failover.
//
// Addresses are deleted in the reverse of the listed order: the kernel lists
// an IPv4 subnet's primary address before its secondaries, and deleting a
// primary first would take its secondaries with it. A VIP added by hand can
// still be the primary of an address that is not a VIP (the node's own,
// added after it); the kernel drops that address with the VIP unless
// promote_secondaries is set, and ReleaseVIPs puts it back.
func ReleaseVIPs(a Addrs, iface string, vips []netip.Addr) ([]netip.Prefix, error) {
	listed, err := a.List(iface)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", iface, err)
	}
	want := vipSet(vips)
	var (
		removed []netip.Prefix
		errs    []error
	)
	for _, p := range slices.Backward(listed) {
		if _, ok := want[p.Addr().Unmap()]; !ok {
			continue
		}
		err := a.Delete(iface, p)
		switch {
		case err == nil:
			removed = append(removed, p)
		case errors.Is(err, ErrAddrNotFound):
			// Gone since the listing (keepalived released it): the goal holds.
		default:
			errs = append(errs, fmt.Errorf("deleting %s from %s: %w", p, iface, err))
		}
	}
	slices.Reverse(removed)
	errs = append(errs, restoreSecondaries(a, iface, listed, want, removed)...)
	return removed, errors.Join(errs...)
}

// restoreSecondaries puts back the addresses that were not VIPs but went
// away with a deleted VIP: without promote_secondaries the kernel deletes an
// IPv4 subnet's secondaries with its primary, and a VIP added by hand with a
// subnet's prefix length can be the primary of the node's own address.
func restoreSecondaries(a Addrs, iface string, listed []netip.Prefix, vips map[netip.Addr]struct{}, removed []netip.Prefix) []error {
	var risky []netip.Prefix
	for _, p := range removed {
		if p.Addr().Is4() && p.Bits() < 32 {
			risky = append(risky, p)
		}
	}
	if len(risky) == 0 {
		return nil
	}
	now, err := a.List(iface)
	if err != nil {
		return []error{fmt.Errorf("listing addresses of %s after deleting VIPs: %w", iface, err)}
	}
	var errs []error
	for _, q := range listed {
		if _, ok := vips[q.Addr().Unmap()]; ok || slices.Contains(now, q) {
			continue
		}
		i := slices.IndexFunc(risky, func(p netip.Prefix) bool { return p.Bits() == q.Bits() && p.Masked() == q.Masked() })
		if i < 0 {
			continue
		}
		if err := a.Add(iface, q); err != nil && !errors.Is(err, ErrAddrExists) {
			errs = append(errs, fmt.Errorf("deleting VIP %s from %s took %s with it, and putting it back failed: %w", risky[i], iface, q, err))
		}
	}
	return errs
}

// HeldVIPs returns the VIPs among vips that are on iface now, in the order of
// vips. It lists the interface's addresses once.
func HeldVIPs(a Lister, iface string, vips []netip.Addr) ([]netip.Addr, error) {
	listed, err := a.List(iface)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", iface, err)
	}
	on := make(map[netip.Addr]struct{}, len(listed))
	for _, p := range listed {
		on[p.Addr().Unmap()] = struct{}{}
	}
	var held []netip.Addr
	for _, v := range vips {
		if _, ok := on[v.Unmap()]; ok {
			held = append(held, v)
		}
	}
	return held, nil
}

func vipSet(vips []netip.Addr) map[netip.Addr]struct{} {
	m := make(map[netip.Addr]struct{}, len(vips))
	for _, v := range vips {
		m[v.Unmap()] = struct{}{}
	}
	return m
}
