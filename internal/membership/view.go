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
			a.Terminating == b.Terminating && a.In == b.In && a.Why == b.Why
	}) && slices.EqualFunc(v.Held, o.Held, func(a, b Held) bool {
		return a.Addr == b.Addr && a.Pod == b.Pod && a.Until.Equal(b.Until)
	})
}

// viewOf builds the view of pods, this pod being self.
func viewOf(pods []*metav1.PartialObjectMetadata, self string) View {
	v := View{Members: make([]Member, 0, len(pods))}
	for _, p := range pods {
		v.Members = append(v.Members, memberOf(p, self))
	}
	slices.SortFunc(v.Members, func(a, b Member) int { return strings.Compare(a.Pod, b.Pod) })
	return v
}

func memberOf(p *metav1.PartialObjectMetadata, self string) Member {
	m := Member{Pod: p.Name, Self: p.Name == self, Terminating: p.DeletionTimestamp != nil}
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
