package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds the retries of a netlink dump that the kernel marked
// interrupted (the table changed while it was being read).
const dumpAttempts = 5

// Netlink reads and changes interfaces, routes and addresses of one network
// namespace over a netlink socket opened in it. It implements Addrs and is
// safe for concurrent use.
type Netlink struct {
	h *netlink.Handle
	// ns is a copy of the namespace handle, for WatchAddrs; closed (-1)
	// means the current namespace.
	ns netns.NsHandle
	// watchCounts are the address watches' (WatchStats).
	watchCounts watchCounts
}

var _ Addrs = (*Netlink)(nil)

// NewNetlink opens a netlink socket in the current network namespace.
func NewNetlink() (*Netlink, error) {
	return NewNetlinkAt(netns.None())
}

// NewNetlinkAt opens a netlink socket in the network namespace ns; a closed
// handle (netns.None()) means the current one. The socket stays in ns for its
// life, so no thread of the caller changes namespace. ns may be closed once
// NewNetlinkAt returns.
func NewNetlinkAt(ns netns.NsHandle) (*Netlink, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket in %s: %w", ns, err)
	}
	own := netns.None()
	if ns.IsOpen() {
		fd, err := unix.FcntlInt(uintptr(ns), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("keeping a handle of %s: %w", ns, err)
		}
		own = netns.NsHandle(fd)
	}
	return &Netlink{h: h, ns: own}, nil
}

// Close releases the socket.
func (n *Netlink) Close() {
	n.h.Close()
	if n.ns.IsOpen() {
		n.ns.Close()
	}
}

// DefaultInterface returns the name of the interface of the default route:
// the IPv4 one when there is one, else the IPv6 one. With several default
// routes of a family the one with the lowest metric wins. It returns an error
// wrapping ErrNoDefaultRoute when there is none.
func (n *Netlink) DefaultInterface() (string, error) {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := dump(func() ([]netlink.Route, error) { return n.h.RouteList(nil, family) })
		if err != nil {
			return "", fmt.Errorf("listing %s routes: %w", familyName(family), err)
		}
		index := defaultRouteLink(routes)
		if index == 0 {
			continue
		}
		link, err := n.h.LinkByIndex(index)
		if err != nil {
			return "", fmt.Errorf("looking up interface %d of the %s default route: %w", index, familyName(family), err)
		}
		return link.Attrs().Name, nil
	}
	return "", ErrNoDefaultRoute
}

// defaultRouteLink returns the interface index of the unicast default route
// with the lowest metric, or 0 when there is none.
func defaultRouteLink(routes []netlink.Route) int {
	best, bestMetric := 0, 0
	for _, r := range routes {
		if r.Type != unix.RTN_UNICAST || !isDefault(r.Dst) {
			continue
		}
		index := r.LinkIndex
		if index == 0 && len(r.MultiPath) > 0 {
			index = r.MultiPath[0].LinkIndex
		}
		if index == 0 {
			continue
		}
		if best == 0 || r.Priority < bestMetric {
			best, bestMetric = index, r.Priority
		}
	}
	return best
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0 && dst.IP.IsUnspecified()
}

func familyName(family int) string {
	if family == netlink.FAMILY_V6 {
		return "IPv6"
	}
	return "IPv4"
}

// Interface returns the interface called name, or a *NoSuchInterfaceError
// listing the interfaces that exist.
func (n *Netlink) Interface(name string) (net.Interface, error) {
	link, err := n.link(name)
	if err != nil {
		return net.Interface{}, err
	}
	a := link.Attrs()
	return net.Interface{
		Index:        a.Index,
		MTU:          a.MTU,
		Name:         a.Name,
		HardwareAddr: a.HardwareAddr,
		Flags:        a.Flags,
	}, nil
}

// link looks name up; a missing link gives a *NoSuchInterfaceError.
func (n *Netlink) link(name string) (netlink.Link, error) {
	link, err := n.h.LinkByName(name)
	if err == nil {
		return link, nil
	}
	var notFound netlink.LinkNotFoundError
	if !errors.As(err, &notFound) && !errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("looking up interface %q: %w", name, err)
	}
	links, lerr := dump(n.h.LinkList)
	if lerr != nil {
		return nil, fmt.Errorf("interface %q not found, and listing the interfaces failed: %w", name, lerr)
	}
	have := make([]string, 0, len(links))
	for _, l := range links {
		have = append(have, l.Attrs().Name)
	}
	slices.Sort(have)
	return nil, &NoSuchInterfaceError{Name: name, Have: have}
}

// NodeAddrs returns the node's own IPv4 and IPv6 address on iface: the first
// primary global-unicast IPv4 address (a secondary one only when no primary
// qualifies) and the first global IPv6 address (a stable one before a
// temporary one), skipping link-local, deprecated, tentative and failed
// addresses and every address in vips, so that a node holding a VIP does not
// take it for its own. A family without such an address gives the zero Addr.
func (n *Netlink) NodeAddrs(iface string, vips []netip.Addr) (v4, v6 netip.Addr, err error) {
	addrs, err := n.addrs(iface)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("listing addresses of %s: %w", iface, err)
	}
	infos := make([]ifaceAddr, 0, len(addrs))
	for _, a := range addrs {
		p, ok := prefixOf(a)
		if !ok {
			continue
		}
		infos = append(infos, ifaceAddr{prefix: p, flags: a.Flags, scope: a.Scope})
	}
	v4, v6 = pickNodeAddrs(infos, vipSet(vips))
	return v4, v6, nil
}

// List returns the addresses on iface in the order the kernel lists them.
func (n *Netlink) List(iface string) ([]netip.Prefix, error) {
	addrs, err := n.addrs(iface)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := prefixOf(a); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// Add puts p on iface. IPv6 addresses skip duplicate address detection, as
// keepalived's VIPs do, so they are usable at once.
func (n *Netlink) Add(iface string, p netip.Prefix) error {
	link, err := n.link(iface)
	if err != nil {
		return err
	}
	a := toNetlinkAddr(p)
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := n.h.AddrAdd(link, a); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding %s to %s: %w", p, iface, ErrAddrExists)
		}
		return fmt.Errorf("adding %s to %s: %w", p, iface, err)
	}
	return nil
}

// Delete removes p, with exactly its prefix length, from iface.
func (n *Netlink) Delete(iface string, p netip.Prefix) error {
	link, err := n.link(iface)
	if err != nil {
		return err
	}
	if err := n.h.AddrDel(link, toNetlinkAddr(p)); err != nil {
		if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("deleting %s from %s: %w", p, iface, ErrAddrNotFound)
		}
		return fmt.Errorf("deleting %s from %s: %w", p, iface, err)
	}
	return nil
}

// addrs lists the addresses of iface: one link lookup and one address dump.
func (n *Netlink) addrs(iface string) ([]netlink.Addr, error) {
	link, err := n.link(iface)
	if err != nil {
		return nil, err
	}
	return dump(func() ([]netlink.Addr, error) { return n.h.AddrList(link, netlink.FAMILY_ALL) })
}

func toNetlinkAddr(p netip.Prefix) *netlink.Addr {
	ip := p.Addr().Unmap()
	return &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(ip.AsSlice()),
		Mask: net.CIDRMask(p.Bits(), ip.BitLen()),
	}}
}

func prefixOf(a netlink.Addr) (netip.Prefix, bool) {
	if a.IPNet == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	ones, bits := a.Mask.Size()
	if bits != ip.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(ip, ones), true
}

// dump runs a netlink dump again while the kernel reports it interrupted.
func dump[T any](f func() ([]T, error)) ([]T, error) {
	var err error
	for range dumpAttempts {
		var out []T
		out, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, fmt.Errorf("%w %d times in a row", err, dumpAttempts)
}
