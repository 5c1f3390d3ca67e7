// Package membership finds a pod's unicast VRRP peers in the cluster: the
// other pods of its own workload, each with the address it publishes on
// itself. It is the only package that talks to the API server (client-go):
// it reads this pod for its labels, publishes this pod's address in an
// annotation, and watches the workload's pods with an informer (a list,
// then a watch: no polling) on their metadata alone.
//
// What the planner needs from it is a View: every pod the watch sees, and
// for each whether its address is a peer and why. The planner turns the
// peers into keepalived's unicast_peer lists.
package membership

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotation is where each pod publishes the addresses it sends unicast VRRP
// from (unicast_src_ip), one per address family, comma-separated.
const Annotation = "ipfailover/unicast-src-ip"

// FastAnnotation says, set to FastValue beside Annotation, that a pod
// speaks VRRPv3. Every pod publishes it: images that chose one VRRP
// version for the whole workload read a pod without it as one that speaks
// VRRPv2, and would switch to VRRPv2 for it.
const FastAnnotation = "ipfailover/fast-adverts"

// FastValue is FastAnnotation's value.
const FastValue = "vrrp3"

// AdvertsAnnotation is where a pod publishes the VRRP its keepalived
// speaks, version and interval (Adverts.String: "vrrp3 0.2s"), for people
// and for `ipfailover peers`.
const AdvertsAnnotation = "ipfailover/adverts"

// Adverts is the VRRP a pod's keepalived speaks for IPv4 (IPv6 is always
// VRRPv3).
type Adverts struct {
	// Version is 2 or 3; 0 when unknown.
	Version int
	// Interval is the advert interval; 0 when unknown.
	Interval time.Duration
}

// String is the AdvertsAnnotation value: "vrrp3 0.2s"; "" when unknown.
func (a Adverts) String() string {
	if a.Version == 0 {
		return ""
	}
	s := fmt.Sprintf("vrrp%d", a.Version)
	if a.Interval > 0 {
		s += " " + strconv.FormatFloat(a.Interval.Seconds(), 'f', -1, 64) + "s"
	}
	return s
}

// ParseAdverts reads an AdvertsAnnotation value.
func ParseAdverts(value string) (Adverts, error) {
	version, interval, _ := strings.Cut(strings.TrimSpace(value), " ")
	var a Adverts
	switch version {
	case "vrrp2":
		a.Version = 2
	case "vrrp3":
		a.Version = 3
	default:
		return Adverts{}, fmt.Errorf("%q: want vrrp2 or vrrp3, then the interval (vrrp3 0.2s)", value)
	}
	if interval == "" {
		return a, nil
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d < 10*time.Millisecond || d > 255*time.Second {
		return Adverts{}, fmt.Errorf("%q: the interval is not 0.01s..255s", value)
	}
	a.Interval = d
	return a, nil
}

// Member is one pod of the workload as the watch sees it.
type Member struct {
	// Pod is the pod's name.
	Pod string
	// Addrs are the addresses it publishes (none while it publishes none).
	Addrs []netip.Addr
	// Self is this pod.
	Self bool
	// Terminating says that the pod is being deleted: it stays a peer until
	// it is gone, so that the others hear its priority-0 adverts.
	Terminating bool
	// In says that Addrs are peers (for Self: that it publishes them).
	In bool
	// Why says why the pod is in or out, for people.
	Why string
	// Adverts is what it publishes in AdvertsAnnotation, or, for a pod
	// that publishes FastAnnotation alone (an image that follows the
	// workload's interval), VRRPv3 at an interval it does not say; zero
	// when it publishes neither.
	Adverts Adverts
	// Revision is the pod's revision labels (the workload's template it
	// runs), "" without any.
	Revision string
	// Heartbeats says that it publishes AdvertsAnnotation: an image that
	// sends the split-brain guard's heartbeats.
	Heartbeats bool
}

// Speaks is the VRRP m's keepalived speaks: what it publishes, or, for a
// pod that publishes its address alone (an older image, which reads the
// same settings), old: what the settings give the nodes that do not
// follow the pods (config.Config.BridgeAdverts). Zero for a pod that
// publishes no address.
func (m Member) Speaks(old Adverts) Adverts {
	switch {
	case len(m.Addrs) == 0:
		return Adverts{}
	case m.Adverts.Version != 0:
		return m.Adverts
	}
	return old
}

// View is the workload's pods, sorted by name.
type View struct {
	Members []Member
	// Held are the addresses that were peers and are no longer (their pod
	// went, or renumbered), peers still until their hold ends (Watcher
	// Options.Hold), sorted by address.
	Held []Held
}

// Held is an address that left the peers and is held as one.
type Held struct {
	Addr netip.Addr
	// Pod is the pod that published it last, and Adverts what it said it
	// speaks (Member.Adverts).
	Pod     string
	Adverts Adverts
	// Until is when it stops being a peer.
	Until time.Time
}

// Peers are the addresses of the members that are in and the held ones,
// other than this pod's, sorted, each once.
func (v View) Peers() []netip.Addr {
	var out []netip.Addr
	self := map[netip.Addr]bool{}
	for _, m := range v.Members {
		if m.Self {
			for _, a := range m.Addrs {
				self[a] = true
			}
		}
	}
	for _, m := range v.Members {
		if m.Self || !m.In {
			continue
		}
		for _, a := range m.Addrs {
			if !self[a] && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	for _, h := range v.Held {
		if !self[h.Addr] && !slices.Contains(out, h.Addr) {
			out = append(out, h.Addr)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// VRRPv2 are the IPv4 addresses of the other members that speak VRRPv2
// (Member.Speaks, old as there), sorted: pods of an older image, which
// keepalived does not hear and which do not hear it. The multicast bridge
// relays this node's masters to them; they are no peers of keepalived.
func (v View) VRRPv2(old Adverts) []netip.Addr {
	var out []netip.Addr
	for _, m := range v.Members {
		if m.Self || !m.In || m.Speaks(old).Version != 2 {
			continue
		}
		for _, a := range m.Addrs {
			if a.Is4() && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Speaks is what its pod said it speaks (Member.Speaks, old as there),
// for a held address.
func (h Held) Speaks(old Adverts) Adverts {
	return Member{Addrs: []netip.Addr{h.Addr}, Adverts: h.Adverts}.Speaks(old)
}

// Unpublished names the other pods that publish no address and run
// another template than this pod: pods of the shipped image or in
// multicast mode, which speak multicast VRRP (the multicast bridge relays
// to them), or a rollout's new pods, starting. A pod of this pod's own
// template that publishes nothing yet is starting and will publish as
// this pod did: it does not count.
func (v View) Unpublished() []string {
	var self Member
	for _, m := range v.Members {
		if m.Self {
			self = m
		}
	}
	var out []string
	for _, m := range v.Members {
		if m.Self || len(m.Addrs) > 0 || (m.Revision != "" && m.Revision == self.Revision) {
			continue
		}
		out = append(out, m.Pod)
	}
	return out
}

// Equal says whether two views list the same pods the same way.
func (v View) Equal(o View) bool {
	return slices.EqualFunc(v.Members, o.Members, func(a, b Member) bool {
		return a.Pod == b.Pod && slices.Equal(a.Addrs, b.Addrs) && a.Self == b.Self &&
			a.Terminating == b.Terminating && a.In == b.In && a.Why == b.Why &&
			a.Adverts == b.Adverts && a.Revision == b.Revision && a.Heartbeats == b.Heartbeats
	}) && slices.EqualFunc(v.Held, o.Held, func(a, b Held) bool {
		return a.Addr == b.Addr && a.Pod == b.Pod && a.Adverts == b.Adverts && a.Until.Equal(b.Until)
	})
}

// viewOf builds the view of pods, this pod being self, without Held.
func viewOf(pods []*metav1.PartialObjectMetadata, self string) View {
	v := View{Members: make([]Member, 0, len(pods))}
	for _, p := range pods {
		v.Members = append(v.Members, memberOf(p, self))
	}
	slices.SortFunc(v.Members, func(a, b Member) int { return strings.Compare(a.Pod, b.Pod) })
	return v
}

// revisionOf is a pod's revision labels, "name=value" joined by commas.
func revisionOf(p *metav1.PartialObjectMetadata) string {
	var out []string
	for _, k := range revisionLabels {
		if v, ok := p.Labels[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return strings.Join(out, ",")
}

func memberOf(p *metav1.PartialObjectMetadata, self string) Member {
	m := Member{Pod: p.Name, Self: p.Name == self, Terminating: p.DeletionTimestamp != nil, Revision: revisionOf(p)}
	if v, ok := p.Annotations[AdvertsAnnotation]; ok {
		// A value that does not parse says nothing: the pod is taken
		// for what its other annotations say.
		m.Adverts, _ = ParseAdverts(v)
		m.Heartbeats = true
	}
	if m.Adverts.Version == 0 && p.Annotations[FastAnnotation] == FastValue {
		m.Adverts.Version = 3
	}
	value, ok := p.Annotations[Annotation]
	if !ok || value == "" {
		m.Why = "publishes no address yet: starting, or an older image or multicast mode (multicast VRRP)"
		return m
	}
	addrs, err := ParseAddrs(value)
	if err != nil {
		m.Why = fmt.Sprintf("its %s annotation %q is not an address list: %v", Annotation, value, err)
		return m
	}
	m.Addrs, m.In = addrs, true
	switch {
	case m.Self:
		m.Why = "this pod"
	case m.Terminating:
		m.Why = "terminating: listed until it is gone, so that its goodbye adverts are heard"
	default:
		m.Why = "running"
	}
	return m
}

// ParseAddrs reads an Annotation value: unicast addresses, comma-separated,
// at most one per family.
func ParseAddrs(value string) ([]netip.Addr, error) {
	var out []netip.Addr
	for f := range strings.SplitSeq(value, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
			return nil, fmt.Errorf("%q is not a unicast address", f)
		}
		if slices.ContainsFunc(out, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			return nil, fmt.Errorf("two addresses of one family")
		}
		out = append(out, a)
	}
	return out, nil
}

// FormatAddrs is the Annotation value for addrs.
func FormatAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
