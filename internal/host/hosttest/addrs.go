// Package hosttest holds an in-memory host for tests: its interfaces and
// their addresses (host.Addrs), and the facts planning reads from them
// (plan.Facts: the default route's interface and the node's own addresses).
package hosttest

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/ipfailover/ipfailover/internal/host"
)

// Addrs is an in-memory host.Addrs: a map from interface name to its
// addresses in the order they were added. It behaves like the kernel where
// callers can tell: Add of a present address fails with host.ErrAddrExists
// (IPv4 may hold one address with two prefix lengths, IPv6 may not),
// Delete matches address and prefix length and fails with
// host.ErrAddrNotFound, and an unknown interface gives a
// *host.NoSuchInterfaceError. It is safe for concurrent use.
type Addrs struct {
	mu     sync.Mutex
	ifaces map[string][]netip.Prefix
	fail   map[netip.Prefix]error
	// Default is the interface of the default route; "" means there is
	// no default route.
	Default string
}

var _ host.Addrs = (*Addrs)(nil)

// New returns an Addrs with the given interfaces and their addresses.
func New(ifaces map[string][]netip.Prefix) *Addrs {
	a := &Addrs{ifaces: map[string][]netip.Prefix{}, fail: map[netip.Prefix]error{}}
	for name, ps := range ifaces {
		a.ifaces[name] = slices.Clone(ps)
	}
	return a
}

// FailDelete makes every later Delete of p fail with err.
func (a *Addrs) FailDelete(p netip.Prefix, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail[p] = err
}

// List implements host.Addrs.
func (a *Addrs) List(iface string) ([]netip.Prefix, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps, ok := a.ifaces[iface]
	if !ok {
		return nil, a.noSuch(iface)
	}
	return slices.Clone(ps), nil
}

// Add implements host.Addrs.
func (a *Addrs) Add(iface string, p netip.Prefix) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps, ok := a.ifaces[iface]
	if !ok {
		return a.noSuch(iface)
	}
	if !p.IsValid() {
		return fmt.Errorf("adding %s to %s: invalid prefix", p, iface)
	}
	if slices.ContainsFunc(ps, func(q netip.Prefix) bool { return clash(p, q) }) {
		return fmt.Errorf("adding %s to %s: %w", p, iface, host.ErrAddrExists)
	}
	a.ifaces[iface] = append(ps, p)
	return nil
}

// Delete implements host.Addrs.
func (a *Addrs) Delete(iface string, p netip.Prefix) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps, ok := a.ifaces[iface]
	if !ok {
		return a.noSuch(iface)
	}
	if err, ok := a.fail[p]; ok {
		return fmt.Errorf("deleting %s from %s: %w", p, iface, err)
	}
	i := slices.Index(ps, p)
	if i < 0 {
		return fmt.Errorf("deleting %s from %s: %w", p, iface, host.ErrAddrNotFound)
	}
	a.ifaces[iface] = slices.Delete(ps, i, i+1)
	return nil
}

// DefaultInterface implements plan.Facts.
func (a *Addrs) DefaultInterface() (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Default == "" {
		return "", host.ErrNoDefaultRoute
	}
	return a.Default, nil
}

// Interface implements plan.Facts: an interface with its name and a made-up
// index.
func (a *Addrs) Interface(name string) (net.Interface, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.ifaces[name]; !ok {
		return net.Interface{}, a.noSuch(name)
	}
	names := slices.Sorted(maps.Keys(a.ifaces))
	return net.Interface{Index: slices.Index(names, name) + 1, Name: name, MTU: 1500}, nil
}

// NodeAddrs implements plan.Facts: the first global unicast address of each
// family on iface that is not one of vips.
func (a *Addrs) NodeAddrs(iface string, vips []netip.Addr) (v4, v6 netip.Addr, err error) {
	ps, err := a.List(iface)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, err
	}
	for _, p := range ps {
		ip := p.Addr().Unmap()
		if !ip.IsGlobalUnicast() || slices.Contains(vips, ip) {
			continue
		}
		if ip.Is4() && !v4.IsValid() {
			v4 = ip
		} else if ip.Is6() && !v6.IsValid() {
			v6 = ip
		}
	}
	return v4, v6, nil
}

// clash says whether the kernel refuses p beside q: IPv4 takes the same
// address again with another prefix length, IPv6 does not.
func clash(p, q netip.Prefix) bool {
	if p.Addr().Is4() {
		return p == q
	}
	return p.Addr() == q.Addr()
}

func (a *Addrs) noSuch(iface string) error {
	have := make([]string, 0, len(a.ifaces))
	for name := range a.ifaces {
		have = append(have, name)
	}
	slices.Sort(have)
	return &host.NoSuchInterfaceError{Name: iface, Have: have}
}
