package splitbrain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/ipfailover/ipfailover/internal/plan"
)

// maxForeignSeries bounds the (router id, source) pairs that
// ipfailover_vrrp_foreign_adverts_total has a series for; adverts of any
// further pair count under source "other", so that a flood of forged
// sources cannot grow the scrape without end.
const maxForeignSeries = 64

// otherSource is the source label of adverts beyond maxForeignSeries.
const otherSource = "other"

// key names one VRRP router of one address family: router ids are per
// family, so IPv4 and IPv6 instances may share one.
type key struct {
	v6   bool
	vrid int
}

// expectation is what an advert of this deployment looks like for one
// router id: what every node derives the same way from the same settings
// (SPEC: the same router id, VIP set, authentication and version), so any
// difference means another deployment speaks on the router id.
type expectation struct {
	instance string
	version  int
	// auth is VRRPv2's PASS authentication data: the first 8 bytes of
	// OPENSHIFT_HA_CONFIG_NAME, zero-padded, as keepalived sends it.
	auth [8]byte
	// vips are the instance's VIPs sorted; order is them in the order
	// keepalived sends them, that of virtual_ipaddress.
	vips, order []netip.Addr
	// peers are the unicast members other than this node; nil with
	// multicast, where any source may be a member.
	peers []netip.Addr
	// vrrp2 are the workload's pods that speak VRRPv2 (plan.Fleet): no
	// peers of keepalived, members all the same.
	vrrp2 []netip.Addr
}

// vrrpAuthPass is VRRPv2's authentication type for a plain password.
const vrrpAuthPass = 1

// expectations derives, from this node's plan, the advert every member of
// the deployment sends for each of its router ids.
func expectations(p *plan.Plan) map[key]expectation {
	var auth [8]byte
	copy(auth[:], p.Config.Name)
	out := make(map[key]expectation, len(p.Instances))
	for _, in := range p.Instances {
		k := key{v6: in.Is6(), vrid: int(in.RouterID)}
		e := expectation{instance: in.Name, version: p.VRRPVersion(), auth: auth, vips: slices.Clone(in.VIPs), order: slices.Clone(in.VIPs)}
		if k.v6 {
			// keepalived speaks VRRPv3 for IPv6 whatever the settings.
			e.version = 3
		} else {
			e.vrrp2 = slices.Clone(p.Fleet.VRRPv2)
		}
		slices.SortFunc(e.vips, netip.Addr.Compare)
		if p.Config.Unicast {
			e.peers = slices.Clone(in.UnicastPeers)
			if e.peers == nil {
				e.peers = []netip.Addr{}
			}
		}
		out[k] = e
	}
	return out
}

// differences lists how a, from src, differs from e; none means it may be
// a member of this deployment.
func (e expectation) differences(a advert, src netip.Addr) []string {
	var d []string
	if a.version != e.version {
		d = append(d, fmt.Sprintf("VRRP version %d where this deployment speaks %d", a.version, e.version))
	} else if a.version == 2 {
		switch {
		case a.authType != vrrpAuthPass:
			d = append(d, fmt.Sprintf("authentication type %d where this deployment uses %d (PASS)", a.authType, vrrpAuthPass))
		case a.auth != e.auth:
			d = append(d, "another authentication password (the first 8 characters of OPENSHIFT_HA_CONFIG_NAME differ)")
		}
	}
	got := slices.Clone(a.addrs)
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, e.vips) {
		d = append(d, fmt.Sprintf("VIPs %s where this deployment has %s", addrList(got), addrList(e.vips)))
	}
	if e.peers != nil && !slices.Contains(e.peers, src) {
		d = append(d, "the source is not one of OPENSHIFT_HA_UNICAST_PEERS")
	}
	return d
}

// member says whether a, from src, is an advert of one of the workload's
// pods that keepalived does not hear: a pod that speaks the other VRRP
// version, or one it does not list, with this deployment's VIPs and
// password. departed adds src to the peers.
func (e expectation) member(a advert, src netip.Addr, departed bool) bool {
	if e.peers == nil || !departed && !slices.Contains(e.peers, src) && !slices.Contains(e.vrrp2, src) {
		return false
	}
	if a.version == 2 && (a.authType != vrrpAuthPass || a.auth != e.auth) {
		return false
	}
	got := slices.Clone(a.addrs)
	slices.SortFunc(got, netip.Addr.Compare)
	return slices.Equal(got, e.vips)
}

func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// foreignKey is one series of ipfailover_vrrp_foreign_adverts_total.
type foreignKey struct {
	vrid   int
	source string
}

// ForeignAdverts is the count of foreign adverts for one router id from
// one source.
type ForeignAdverts struct {
	VRID int
	// Source is the advert's IP source address, or "other" past the
	// series limit.
	Source  string
	Adverts uint64
}

// foreign counts foreign adverts; it is safe for concurrent use (each
// address family has its own reader).
type foreign struct {
	mu     sync.Mutex
	counts map[foreignKey]uint64
	seen   map[netip.Addr]bool
	// seenOther is set once a source past the limit was reported.
	seenOther bool
}

func newForeign() *foreign {
	return &foreign{counts: map[foreignKey]uint64{}, seen: map[netip.Addr]bool{}}
}

// add counts one foreign advert and reports whether src is new: the first
// foreign advert from it, which the caller logs.
func (f *foreign) add(vrid int, src netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := foreignKey{vrid, src.String()}
	if _, ok := f.counts[k]; !ok && len(f.counts) >= maxForeignSeries {
		k.source = otherSource
	}
	f.counts[k]++
	switch {
	case f.seen[src]:
		return false
	case len(f.seen) < maxForeignSeries:
		f.seen[src] = true
		return true
	case !f.seenOther:
		f.seenOther = true
		return true
	}
	return false
}

func (f *foreign) snapshot() []ForeignAdverts {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ForeignAdverts, 0, len(f.counts))
	for k, n := range f.counts {
		out = append(out, ForeignAdverts{VRID: k.vrid, Source: k.source, Adverts: n})
	}
	slices.SortFunc(out, func(a, b ForeignAdverts) int {
		if a.VRID != b.VRID {
			return a.VRID - b.VRID
		}
		return strings.Compare(a.Source, b.Source)
	})
	return out
}
