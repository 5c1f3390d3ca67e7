package chaos

import (
	"net/netip"
	"slices"
	"time"
)

// Hiccups are the spans in which the machine, not the failover, kept the
// client from its answers: the client probes every node's own address as
// it probes the VIPs (Data.Controls, the same service on the same port),
// and in a hiccup every node that no fault had silenced failed to answer
// there too (its probes failed, or waited with no answer: see
// controlFails), at least two of them, while no fault impaired the
// segment. Addresses that never move cannot be failing over; when two or
// three nodes' own answers stop at once, the VIPs' outages in that span
// are the machine's (a 2-core host running the cluster, its control plane
// and the client), like the client's own stalls.
//
// A node counts as down while a fault silenced it (see nodeDowns). A
// segment fault's whole window has no hiccup: its loss and delay are what
// the client's failed probes then measure.
func (d *Data) Hiccups() []Interval {
	if len(d.Controls) < 2 || len(d.Controls) != len(d.Nodes) {
		return nil
	}
	fails := d.controlFails(d.Controls)
	downs := d.nodeDowns()
	impaired := d.impaired()
	var out []Interval
	for _, p := range pieces(nil, append(append(slices.Clone(fails), downs...), impaired)...) {
		mid := p.Start.Add(p.Len() / 2)
		if spanAt(impaired, mid) {
			continue
		}
		witnesses, all := 0, true
		for n := range fails {
			if spanAt(downs[n], mid) {
				continue
			}
			witnesses++
			if !spanAt(fails[n], mid) {
				all = false
				break
			}
		}
		if all && witnesses >= 2 {
			out = append(out, p)
		}
	}
	return merge(out)
}

// controlFails are, by node index, the spans in which the node did not
// answer the client at its own address (controls: Data.Controls or
// Controls6): the outages of those probes, less the probes that timed out
// in flight while the client stalled, and its answer gaps (see
// answerGaps), in which its probes waited and none was answered although
// none timed out either.
func (d *Data) controlFails(controls [][]Probe) [][]Interval {
	fails := make([][]Interval, len(controls))
	for n, ps := range controls {
		judged, _ := d.outsideStalls(ps)
		for _, o := range Outages(judged) {
			fails[n] = append(fails[n], o.Interval)
		}
		fails[n] = merge(append(fails[n], answerGaps(judged)...))
	}
	return fails
}

// silenceAfter is the longest a node may leave its probes waiting
// without an answer before it counts as silent: as long as the client
// may go between two rounds of probes before it counts as stalled.
const silenceAfter = StallAfter * ProbeInterval

// answerGaps are the spans, longer than silenceAfter, in which probes of
// ps (in order of sending) waited and no answer came: from the earliest
// probe still waiting after an answer to the next answer, less the answer
// time before the gap (as an outage's end is). A node that stops (starved
// of CPU, its kernel busy) and then answers the backlog at once within
// the deadline leaves no probe failed, only the gap; the client heard
// nothing from it then.
func answerGaps(ps []Probe) []Interval {
	var answers []Probe
	for _, p := range ps {
		if p.OK {
			answers = append(answers, p)
		}
	}
	slices.SortFunc(answers, func(a, b Probe) int { return a.Done.Compare(b.Done) })
	var out []Interval
	for k := 0; k+1 < len(answers); k++ {
		a, b := answers[k], answers[k+1]
		end := b.Done.Add(-a.Done.Sub(a.Sent))
		if end.Sub(a.Done) <= silenceAfter {
			continue
		}
		// A probe waits at most its deadline: the ones sent more than
		// that before a's answer were done by it (twice that, for a
		// margin).
		i, _ := slices.BinarySearchFunc(ps, a.Done.Add(-2*ProbeDeadline), func(p Probe, t time.Time) int { return p.Sent.Compare(t) })
		for _, p := range ps[i:] {
			if !p.Sent.Before(end) {
				break
			}
			if p.Done.After(a.Done) {
				if start := later(p.Sent, a.Done); end.Sub(start) > silenceAfter {
					out = append(out, Interval{start, end})
				}
				break
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// impaired are the windows of the segment's faults: the client's probes
// are lost or late on the segment then, whatever the nodes do.
func (d *Data) impaired() []Interval {
	var out []Interval
	for _, r := range d.Records {
		if r.Kind == Segment {
			out = append(out, d.Window(r))
		}
	}
	return out
}

// nodeDowns are, by node index, the spans in which a fault had silenced
// the node (see Mutes: a pod deleted, a keepalived killed or a node
// drained leave its own address answering), from the injection less Lead
// (a probe in flight then fails with it) to its recovery.
func (d *Data) nodeDowns() [][]Interval {
	downs := make([][]Interval, len(d.Nodes))
	for _, r := range d.Records {
		if !Mutes(r.Kind) {
			continue
		}
		for _, nd := range r.Downs {
			if nd.Node >= 0 && nd.Node < len(downs) {
				downs[nd.Node] = append(downs[nd.Node], Interval{nd.Start.Add(-d.Lead), nd.End})
			}
		}
	}
	return downs
}

// liveHolders returns the nodes that held vip at t and that no fault had
// silenced (downs: nodeDowns; a frozen node keeps its addresses, and
// answers nobody).
func (d *Data) liveHolders(downs [][]Interval, vip netip.Addr, t time.Time) []string {
	var out []string
	for _, h := range HoldersAt(d.Holdings[vip], t) {
		if n := slices.Index(d.Nodes, h); n >= 0 && n < len(downs) && !spanAt(downs[n], t) {
			out = append(out, h)
		}
	}
	return out
}

// muteHolders returns the live holders of vip at t that did not answer
// the client at their own address then either: the VIP was in place and
// the node itself did not answer.
func (d *Data) muteHolders(fails, downs [][]Interval, vip netip.Addr, t time.Time) []string {
	var out []string
	for _, h := range d.liveHolders(downs, vip, t) {
		if n := slices.Index(d.Nodes, h); n < len(fails) && spanAt(fails[n], t) {
			out = append(out, h)
		}
	}
	return out
}

// silentSpans are the spans in which vip's holders were all silent: the
// VIP had a holder, the client's neighbour entry sent to one of them, and
// every holder, with no fault taking it down, did not answer the client at
// its own address either. The VIP was where VRRP and the client agreed it
// was; the node did not answer (a node starved of CPU, a kernel too busy
// to answer in time), which no failover could have mended. A holder that
// a fault took down is left out, unless the client sent to it. Within a
// segment fault's window, whose losses hit both probes, a node is silent
// only in a control outage of at least segmentSilence. fails and downs are
// controlFails and nodeDowns.
func (d *Data) silentSpans(vip netip.Addr, fails, downs [][]Interval) []Interval {
	if len(fails) != len(d.Nodes) {
		return nil
	}
	long := make([][]Interval, len(fails))
	for n, fs := range fails {
		for _, f := range fs {
			if f.Len() >= segmentSilence {
				long[n] = append(long[n], f)
			}
		}
	}
	var changes []time.Time
	for _, c := range d.Holdings[vip] {
		changes = append(changes, c.At)
	}
	for _, e := range d.Entries[vip] {
		changes = append(changes, e.At)
	}
	impaired := d.impaired()
	var out []Interval
	for _, p := range pieces(changes, append(append(slices.Clone(fails), downs...), impaired)...) {
		mid := p.Start.Add(p.Len() / 2)
		// The client sending to a holder a fault took down is the
		// failover's to mend; the live holders' silence is not.
		live := d.liveHolders(downs, vip, mid)
		if len(live) == 0 || !slices.Contains(live, EntryAt(d.Entries[vip], mid)) {
			continue
		}
		judged := fails
		if spanAt(impaired, mid) {
			judged = long
		}
		if len(d.muteHolders(judged, downs, vip, mid)) == len(live) {
			out = append(out, p)
		}
	}
	return merge(out)
}

// segmentSilence is how long a node's own address must go unanswered
// within a segment fault's window to count as the node's silence: twice
// the probes' deadline. The segment's loss fails probes one by one (a
// tenth of a second of them in a row is already rare at 5 %), and its
// start and end, which replace the queue of delayed packets, fail every
// probe then in flight at every node at once (for up to the deadline and
// a probe's interval).
const segmentSilence = 2 * ProbeDeadline

// unannouncedSpans are the spans in which the client sent vip's packets
// to a node that listed vip on its running link while its kernel had not
// announced it (see Unannounced): from the client's entry naming the node
// until the node held vip (its announcement), the entry named another, or
// the run's end. VRRP had moved the VIP and the client had followed; the
// node's kernel had not yet made the address reachable, which no failover
// could have hurried.
func (d *Data) unannouncedSpans(vip netip.Addr) []Interval {
	var out []Interval
	for _, l := range d.Unannounced[vip] {
		end := d.End
		for _, c := range d.Holdings[vip] {
			if c.At.After(l.At) && slices.Contains(c.Holders, l.Node) {
				end = c.At
				break
			}
		}
		for _, e := range d.Entries[vip] {
			if e.At.After(l.At) && e.Node != l.Node {
				if e.At.Before(end) {
					end = e.At
				}
				break
			}
		}
		if end.After(l.At) {
			out = append(out, Interval{l.At, end})
		}
	}
	return merge(out)
}

// pieces cuts time at the given moments and at both ends of every
// interval of the sets, and returns the pieces between consecutive cuts:
// nothing the sets say changes within one, so its middle stands for it.
func pieces(at []time.Time, sets ...[]Interval) []Interval {
	ts := slices.Clone(at)
	for _, set := range sets {
		for _, i := range set {
			ts = append(ts, i.Start, i.End)
		}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	ts = slices.CompactFunc(ts, func(a, b time.Time) bool { return a.Equal(b) })
	var out []Interval
	for k := 0; k+1 < len(ts); k++ {
		out = append(out, Interval{ts[k], ts[k+1]})
	}
	return out
}

// spanAt reports whether an interval of is contains t.
func spanAt(is []Interval, t time.Time) bool {
	return slices.ContainsFunc(is, func(i Interval) bool { return i.Contains(t) })
}

// slowTail is the end of outage o that was the answering node's slowness,
// not the VIP's absence: an outage ends when the answer to its first
// answered probe came, less the answer time before it (a probe can wait
// on the path for the VIP to appear), so a node slow to answer anything
// (starved of CPU, a backlog of connections) stretches it. When the
// node's own address, probed in the same round, answered as slowly, the
// VIP's answer was no slower than the node's: the outage's part after that
// answer less the node's own answer time is the node's, not the
// failover's. A control probe of the round that got no answer waited its
// whole deadline: the node was slower still. ok is false when no control
// probe was sent in the round, or the node answered sooner than that.
// controls are the probes of the nodes' own addresses in the VIP's family.
func (d *Data) slowTail(o Outage, controls [][]Probe) (Interval, bool) {
	b := o.Back
	n := slices.Index(d.Nodes, b.Node)
	if !b.OK || n < 0 || n >= len(controls) {
		return Interval{}, false
	}
	ps := controls[n]
	i, _ := slices.BinarySearchFunc(ps, b.Sent, func(p Probe, t time.Time) int { return p.Sent.Compare(t) })
	// own is the node's own answer time in the round: the slowest of the
	// control probes sent within half an interval of b.
	var own time.Duration
	for _, j := range []int{i - 1, i} {
		if j >= 0 && j < len(ps) && ps[j].Sent.Sub(b.Sent).Abs() <= ProbeInterval/2 {
			own = max(own, ps[j].Done.Sub(ps[j].Sent))
		}
	}
	if own == 0 {
		return Interval{}, false
	}
	from := b.Done.Add(-own)
	if from.Before(b.Sent) {
		from = b.Sent
	}
	if !from.Before(o.End) {
		return Interval{}, false
	}
	return Interval{from, o.End}, true
}

// atDeadline reports whether outage o of vip (its probes judged, in order
// of sending) is only the answering node's slowness at the deadline's
// edge: it lasted no longer than a deadline, and every probe that failed
// in it timed out while the client sent to the node that held the VIP
// and then answered it (o.Back), neither changing while the probe was in
// flight, and that node's own address, probed within an interval of it,
// took no less than the deadline less an interval to answer, and
// answered. A node that answers everything in about the deadline (starved
// of CPU) leaves some probes a few milliseconds past it and others just
// within; the VIP was where it was, answered as the node answered
// anything. A longer run of timeouts, while the node's own address kept
// answering within the deadline, is the VIP's. Within a segment fault's
// window, or while a fault silenced the node (downs: nodeDowns), a
// timeout is the path's or the failover's, not the node's. controls are
// the probes of the nodes' own addresses in the VIP's family.
func (d *Data) atDeadline(vip netip.Addr, o Outage, judged []Probe, controls [][]Probe, downs [][]Interval) bool {
	node := o.Back.Node
	n := slices.Index(d.Nodes, node)
	if !o.Back.OK || n < 0 || n >= len(controls) || o.Len() > ProbeDeadline {
		return false
	}
	ctl := controls[n]
	impaired := d.impaired()
	i, _ := slices.BinarySearchFunc(judged, o.Start, func(p Probe, t time.Time) int { return p.Sent.Compare(t) })
	failed := 0
	for _, f := range judged[i:] {
		if !f.Sent.Before(o.End) {
			break
		}
		if f.OK {
			continue
		}
		failed++
		if f.Err != "timeout" || EntryAt(d.Entries[vip], f.Sent) != node || !slices.Contains(d.liveHolders(downs, vip, f.Sent), node) ||
			spanAt(impaired, f.Sent) || d.movedWithin(vip, Interval{f.Sent, f.Done}) {
			return false
		}
		j, _ := slices.BinarySearchFunc(ctl, f.Sent.Add(-ProbeInterval), func(p Probe, t time.Time) int { return p.Sent.Compare(t) })
		edge := false
		for _, c := range ctl[j:] {
			if c.Sent.After(f.Sent.Add(ProbeInterval)) {
				break
			}
			if c.OK && c.Done.Sub(c.Sent) >= ProbeDeadline-ProbeInterval {
				edge = true
				break
			}
		}
		if !edge {
			return false
		}
	}
	return failed > 0
}

// movedWithin reports whether vip's holders or the client's entry for it
// changed within i: a VIP gone and back, or the client sent elsewhere and
// back, while a probe was in flight.
func (d *Data) movedWithin(vip netip.Addr, i Interval) bool {
	return slices.ContainsFunc(d.Holdings[vip], func(c HolderChange) bool { return i.Contains(c.At) }) ||
		slices.ContainsFunc(d.Entries[vip], func(e EntryChange) bool { return i.Contains(e.At) })
}
