package chaos

import (
	"slices"
	"time"
)

// Hiccups are the spans in which the machine, not the failover, kept the
// client from its answers: the client probes every node's own address as
// it probes the VIPs (Data.Controls, the same service on the same port),
// and in a hiccup every node that a fault did not take down failed to
// answer there too, at least two of them, while no fault impaired the
// segment. Addresses that never move cannot be failing over; when two or
// three nodes' own answers stop at once, the VIPs' outages in that span
// are the machine's (a 2-core host running the cluster, its control plane
// and the client), like the client's own stalls.
//
// A node counts as down from its fault's injection less Lead (a probe in
// flight then fails with it) to its recovery. A segment fault's whole
// window has no hiccup: its loss and delay are what the client's failed
// probes then measure.
func (d *Data) Hiccups() []Interval {
	if len(d.Controls) < 2 {
		return nil
	}
	fails := make([][]Interval, len(d.Controls))
	for n, ps := range d.Controls {
		judged, _ := d.outsideStalls(ps)
		for _, o := range Outages(judged) {
			fails[n] = append(fails[n], o.Interval)
		}
	}
	downs := make([][]Interval, len(d.Controls))
	var impaired []Interval
	for _, r := range d.Records {
		for _, nd := range r.Downs {
			if nd.Node >= 0 && nd.Node < len(downs) {
				downs[nd.Node] = append(downs[nd.Node], Interval{nd.Start.Add(-d.Lead), nd.End})
			}
		}
		if r.Kind == Segment {
			impaired = append(impaired, d.Window(r))
		}
	}
	// Between two consecutive boundaries nothing changes: judge each
	// piece by its middle.
	var ts []time.Time
	for n := range fails {
		for _, i := range append(slices.Clone(fails[n]), downs[n]...) {
			ts = append(ts, i.Start, i.End)
		}
	}
	for _, i := range impaired {
		ts = append(ts, i.Start, i.End)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	ts = slices.CompactFunc(ts, func(a, b time.Time) bool { return a.Equal(b) })
	in := func(is []Interval, t time.Time) bool {
		return slices.ContainsFunc(is, func(i Interval) bool { return i.Contains(t) })
	}
	var out []Interval
	for k := 0; k+1 < len(ts); k++ {
		mid := ts[k].Add(ts[k+1].Sub(ts[k]) / 2)
		if in(impaired, mid) {
			continue
		}
		witnesses, all := 0, true
		for n := range fails {
			if in(downs[n], mid) {
				continue
			}
			witnesses++
			if !in(fails[n], mid) {
				all = false
				break
			}
		}
		if all && witnesses >= 2 {
			out = append(out, Interval{ts[k], ts[k+1]})
		}
	}
	return merge(out)
}
