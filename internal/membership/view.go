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
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotation is where each pod publishes the addresses it sends unicast VRRP
// from (unicast_src_ip), one per address family, comma-separated.
const Annotation = "ipfailover/unicast-src-ip"

// FastAnnotation is where a pod, setting it to FastValue beside
// Annotation, says that it follows the fleet's advert interval: VRRPv3 at
// the fast interval while every pod of the workload can, VRRPv2 at 1 s
// (what older images and the shipped image speak) otherwise. VRRPv2 and VRRPv3 speakers drop each
// other's adverts, so the fleet speaks one or the other as a whole.
const FastAnnotation = "ipfailover/fast-adverts"

// FastValue is FastAnnotation's value.
const FastValue = "vrrp3"

// FastGrace is how long a pod of another revision that publishes nothing
// yet is taken to be one that will publish FastAnnotation (a rollout's new
// pod, starting), before it holds the fleet at the slow interval as one
// that speaks multicast VRRPv2 would (the shipped image, or multicast
// mode). Such a pod takes a VIP no sooner than its container starts and
// its keepalived's master-down interval (over 3 s at 1 s adverts) ends
// after that; the fleet is back at VRRPv2 before.
const FastGrace = 3 * time.Second

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
	// Fast says that the pod publishes FastAnnotation.
	Fast bool
	// Revision is the pod's revision labels (the workload's template it
	// runs), "" without any.
	Revision string
	// Created is the pod's creation time.
	Created time.Time
}

// View is the workload's pods, sorted by name.
type View struct {
	Members []Member
	// Held are the addresses that were peers and are no longer (their pod
	// went, or renumbered), peers still until their hold ends (Watcher
	// Options.Hold), sorted by address.
	Held []Held
	// Slow are the other pods that hold the fleet at the slow adverts
	// (FastAnnotation), sorted by pod.
	Slow []Slow
}

// Slow is a pod that holds the fleet at the slow adverts, and why.
type Slow struct {
	Pod, Why string
}

// Fast says whether every other pod lets the fleet use fast adverts.
func (v View) Fast() bool { return len(v.Slow) == 0 }

// fleetSlow finds the other pods of v that hold the fleet at the slow
// adverts at now, and when the answer changes by itself (a pod's
// FastGrace ending; zero: never).
func fleetSlow(v View, now time.Time) (slow []Slow, recheck time.Time) {
	var self Member
	for _, m := range v.Members {
		if m.Self {
			self = m
		}
	}
	for _, m := range v.Members {
		switch {
		case m.Self || m.Fast:
		case len(m.Addrs) > 0:
			slow = append(slow, Slow{m.Pod, "publishes its unicast address without " + FastAnnotation + ": an older image, or OPENSHIFT_HA_ADVERT_INTERVAL set (VRRPv2 at 1 s)"})
		case m.Revision != "" && m.Revision == self.Revision:
			// This pod's own template: it publishes as this pod did.
		case now.Before(m.Created.Add(FastGrace)):
			if until := m.Created.Add(FastGrace); recheck.IsZero() || until.Before(recheck) {
				recheck = until
			}
		default:
			slow = append(slow, Slow{m.Pod, "publishes nothing: the shipped image or multicast mode (VRRPv2 at 1 s), or an image of another revision still starting"})
		}
	}
	return slow, recheck
}

// Held is an address that left the peers and is held as one.
type Held struct {
	Addr netip.Addr
	// Pod is the pod that published it last.
	Pod string
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

// Unpublished names the other pods that publish no address: pods that are
// starting, or pods of an older image or in multicast mode, which speak
// multicast VRRP (the multicast bridge relays to them).
func (v View) Unpublished() []string {
	var out []string
	for _, m := range v.Members {
		if !m.Self && len(m.Addrs) == 0 {
			out = append(out, m.Pod)
		}
	}
	return out
}

// Equal says whether two views list the same pods the same way.
func (v View) Equal(o View) bool {
	return slices.EqualFunc(v.Members, o.Members, func(a, b Member) bool {
		return a.Pod == b.Pod && slices.Equal(a.Addrs, b.Addrs) && a.Self == b.Self &&
			a.Terminating == b.Terminating && a.In == b.In && a.Why == b.Why &&
			a.Fast == b.Fast && a.Revision == b.Revision && a.Created.Equal(b.Created)
	}) && slices.EqualFunc(v.Held, o.Held, func(a, b Held) bool {
		return a.Addr == b.Addr && a.Pod == b.Pod && a.Until.Equal(b.Until)
	}) && slices.Equal(v.Slow, o.Slow)
}

// viewOf builds the view of pods, this pod being self, without Held and
// Slow.
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
	m := Member{Pod: p.Name, Self: p.Name == self, Terminating: p.DeletionTimestamp != nil,
		Fast: p.Annotations[FastAnnotation] == FastValue, Revision: revisionOf(p), Created: p.CreationTimestamp.Time}
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
