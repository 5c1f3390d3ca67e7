package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netns"

	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/test/lab"
)

// Watcher dumps the addresses of every node's eth0 over netlink sockets
// opened in the nodes' namespaces: the kernel's view, not keepalived's.
type Watcher struct {
	nodes []*lab.Node
	nl    []*host.Netlink
}

// NewWatcher opens one netlink socket per node.
func NewWatcher(nodes []*lab.Node) (*Watcher, error) {
	w := &Watcher{nodes: nodes}
	for _, n := range nodes {
		ns, err := netns.GetFromName(n.Netns)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("opening netns %s: %w", n.Netns, err)
		}
		nl, err := host.NewNetlinkAt(ns)
		ns.Close()
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("netlink in %s: %w", n.Netns, err)
		}
		w.nl = append(w.nl, nl)
	}
	return w, nil
}

// Close releases the sockets.
func (w *Watcher) Close() {
	for _, nl := range w.nl {
		nl.Close()
	}
	w.nl = nil
}

// Snapshot is one dump of every node's addresses.
type Snapshot struct {
	// At is when the dump finished.
	At    time.Time
	nodes []*lab.Node
	// on lists, per address, the indexes of the nodes that have it.
	on map[netip.Addr][]int
}

// Holders returns the nodes that have vip on eth0, skipping the ones in
// skip (a crashed node keeps its addresses on a link that is down).
func (s Snapshot) Holders(vip netip.Addr, skip ...*lab.Node) []*lab.Node {
	var out []*lab.Node
	for _, i := range s.on[vip] {
		if n := s.nodes[i]; !slices.Contains(skip, n) {
			out = append(out, n)
		}
	}
	return out
}

// OneHolder reports whether each of vips has exactly one holder.
func (s Snapshot) OneHolder(vips []netip.Addr, skip ...*lab.Node) bool {
	for _, v := range vips {
		if len(s.Holders(v, skip...)) != 1 {
			return false
		}
	}
	return true
}

// Holder returns the single holder of vip, or nil.
func (s Snapshot) Holder(vip netip.Addr, skip ...*lab.Node) *lab.Node {
	hs := s.Holders(vip, skip...)
	if len(hs) != 1 {
		return nil
	}
	return hs[0]
}

// Snapshot dumps every node's addresses once.
func (w *Watcher) Snapshot() (Snapshot, error) {
	s := Snapshot{nodes: w.nodes, on: map[netip.Addr][]int{}}
	for i, nl := range w.nl {
		as, err := nl.List(lab.Link)
		if err != nil {
			return s, fmt.Errorf("%s: %w", w.nodes[i].Name, err)
		}
		for _, p := range as {
			s.on[p.Addr()] = append(s.on[p.Addr()], i)
		}
	}
	s.At = time.Now()
	return s, nil
}

// Wait dumps the addresses every interval until cond accepts a snapshot,
// and returns that snapshot and the longest time between two dumps: the
// resolution of a time measured with it.
func (w *Watcher) Wait(ctx context.Context, interval time.Duration, cond func(Snapshot) bool) (Snapshot, time.Duration, error) {
	var gap time.Duration
	var prev time.Time
	for {
		s, err := w.Snapshot()
		if err != nil {
			return s, gap, err
		}
		if !prev.IsZero() {
			gap = max(gap, s.At.Sub(prev))
		}
		prev = s.At
		if cond(s) {
			return s, gap, nil
		}
		select {
		case <-ctx.Done():
			return s, gap, context.Cause(ctx)
		case <-time.After(interval):
		}
	}
}

// Release removes vips from every node.
func (w *Watcher) Release(vips []netip.Addr) error {
	var errs []error
	for i, nl := range w.nl {
		if _, err := host.ReleaseVIPs(nl, lab.Link, vips); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.nodes[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

// Settled is the outcome of WaitSettled.
type Settled struct {
	// At is the first dump of the settled state: one holder per VIP,
	// unchanged since.
	At Snapshot
	// Split is how long, by the dumps, some VIP had several holders at once
	// before the state settled.
	Split time.Duration
	// Gap is the longest time between two dumps.
	Gap time.Duration
}

// WaitSettled dumps the addresses every interval until every VIP of vips
// has had the same single holder for hold, or ok returns an error. A
// cluster that just started can show one holder per VIP for a moment while
// nodes whose timers ran out together still sort out who is master; hold
// lets that pass.
func (w *Watcher) WaitSettled(ctx context.Context, interval, hold time.Duration, vips []netip.Addr, ok func() error, changed func(Snapshot, string)) (Settled, error) {
	var st Settled
	var since, prev Snapshot
	var sinceKey, prevKey string
	for {
		s, err := w.Snapshot()
		if err != nil {
			return st, err
		}
		if !prev.At.IsZero() {
			gap := s.At.Sub(prev.At)
			st.Gap = max(st.Gap, gap)
			if prev.split(vips) {
				st.Split += gap
			}
		}
		prev = s
		if err := ok(); err != nil {
			return st, err
		}
		key := s.key(vips)
		if key != prevKey {
			changed(s, key)
			prevKey = key
		}
		switch {
		case !s.OneHolder(vips):
			since, sinceKey = Snapshot{}, ""
		case since.At.IsZero() || key != sinceKey:
			since, sinceKey = s, key
		case s.At.Sub(since.At) >= hold:
			st.At = since
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("%w; last seen: %s", context.Cause(ctx), s.key(vips))
		case <-time.After(interval):
		}
	}
}

func (s Snapshot) split(vips []netip.Addr) bool {
	for _, v := range vips {
		if len(s.Holders(v)) > 1 {
			return true
		}
	}
	return false
}

// key describes the holders of vips.
func (s Snapshot) key(vips []netip.Addr) string {
	var b []byte
	for _, v := range vips {
		b = append(b, v.String()...)
		b = append(b, '=')
		for _, n := range s.Holders(v) {
			b = append(b, n.Name...)
			b = append(b, ',')
		}
		b = append(b, ' ')
	}
	return string(b)
}
