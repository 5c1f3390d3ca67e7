package chaos

import (
	"net/netip"
	"slices"
	"time"
)

// Interval is a span of time, End after Start.
type Interval struct {
	Start, End time.Time
}

// Len is the interval's length.
func (i Interval) Len() time.Duration { return i.End.Sub(i.Start) }

// Contains reports whether t is in [Start, End].
func (i Interval) Contains(t time.Time) bool { return !t.Before(i.Start) && !t.After(i.End) }

// Overlaps reports whether the two intervals share a moment.
func (i Interval) Overlaps(j Interval) bool { return !i.End.Before(j.Start) && !j.End.Before(i.Start) }

// clip is i within [from, to], and whether anything is left.
func (i Interval) clip(from, to time.Time) (Interval, bool) {
	if i.Start.Before(from) {
		i.Start = from
	}
	if i.End.After(to) {
		i.End = to
	}
	return i, i.End.After(i.Start)
}

// Outage is a run of failed probes of one VIP: from the first failed
// probe's start to the answer of the first probe after it that succeeded,
// less the round trip the path took just before the outage (so an answer
// that came late, once the VIP was back, does not shorten the outage, and
// a slow path does not lengthen it), but not before that probe's start.
type Outage struct {
	Interval
	// Failed is how many probes failed in a row.
	Failed int
	// Reason is the failure most probes of the run gave (refused,
	// timeout, ...).
	Reason string
	// Stalled is how long the client itself was stalled within the
	// outage (see Data.Stalls): not counted as the VIP's.
	Stalled time.Duration
	// Hiccup is how long of the outage, outside the client's stalls, the
	// machine hiccuped (see Data.Hiccups): not held against a limit.
	Hiccup time.Duration
	// Stranded names the node the client's neighbour entry sent the
	// VIP's packets to in the middle of the outage, when that node did not
	// hold the VIP then ("" otherwise): a client left behind.
	Stranded string
	// Mute names the nodes that held the VIP in the middle of the outage
	// and did not answer the client at their own address then either
	// (see Data.Controls): the VIP was where it should be, the node
	// itself did not answer.
	Mute []string
	// Silent is how long of the outage, outside the client's stalls and
	// the machine's hiccups, the VIP's holders were silent at their own
	// addresses too (see Data.silentSpans): not held against a limit.
	Silent time.Duration
	// Unannounced is how long of the outage, outside the above, the
	// client sent to a node that listed the VIP while its kernel had not
	// announced it (see Data.unannouncedSpans): not held against a limit.
	Unannounced time.Duration
	// Slow is how long of the outage, outside the above, was the
	// answering node's slowness: its end (see Data.slowTail), or all of
	// it when it was the node's answers at the deadline's edge (see
	// Data.atDeadline). Not held against a limit.
	Slow time.Duration
	// Back is the probe whose answer ended the outage, the quickest after
	// it (zero when the outage lasted to the end of the probes).
	Back Probe
}

// Counted is the part of the outage held against the limits: its length
// less the client's stalls, the machine's hiccups, its holders' silence,
// a kernel's late announcement and the answering node's slowness in it.
// (Availability leaves out only the client's stalls: it is what the
// client saw.)
func (o Outage) Counted() time.Duration {
	return o.Len() - o.Stalled - o.Hiccup - o.Silent - o.Unannounced - o.Slow
}

func sortBySent(ps []Probe) []Probe {
	ps = slices.Clone(ps)
	slices.SortStableFunc(ps, func(a, b Probe) int { return a.Sent.Compare(b.Sent) })
	return ps
}

// Outages finds the runs of failed probes in ps (in order of sending). An
// outage ends with the earliest answer of the probes that succeeded after
// it, less the answer time before it. A run still going at the end lasts
// to the last probe's end.
func Outages(ps []Probe) []Outage {
	var out []Outage
	var cur *Outage
	// rtt is the answer time of the last probe that succeeded.
	var rtt time.Duration
	reasons := map[string]int{}
	closeAt := func(end time.Time) {
		cur.End = end
		best := 0
		for r, n := range reasons {
			if n > best || n == best && r < cur.Reason {
				cur.Reason, best = r, n
			}
		}
		out = append(out, *cur)
		cur = nil
	}
	// back is when the VIP answered again by probe q: its answer less the
	// answer time before the outage, not before it was sent.
	back := func(q Probe) time.Time {
		if end := q.Done.Add(-rtt); end.After(q.Sent) {
			return end
		}
		return q.Sent
	}
	for i, p := range ps {
		switch {
		case !p.OK && cur == nil && len(out) > 0 && p.Sent.Before(out[len(out)-1].End):
			// Sent before the last outage ended (a later probe's
			// quicker answer ended it): the outage goes on.
			last := out[len(out)-1]
			out, cur = out[:len(out)-1], &last
			cur.Failed++
			reasons[p.Err]++
		case !p.OK && cur == nil:
			clear(reasons)
			cur = &Outage{Interval: Interval{Start: p.Sent}, Failed: 1}
			reasons[p.Err]++
		case !p.OK:
			cur.Failed++
			reasons[p.Err]++
		case cur != nil:
			// A probe sent later may be answered sooner: the first went
			// a slower way (through the old holder, which forwards it).
			// The VIP was back by the quicker answer.
			cur.Back = p
			end := back(p)
			for _, q := range ps[i+1:] {
				if !q.Sent.Before(end) {
					break
				}
				if q.OK && back(q).Before(end) {
					cur.Back, end = q, back(q)
				}
			}
			closeAt(end)
			rtt = p.Done.Sub(p.Sent)
		default:
			rtt = p.Done.Sub(p.Sent)
		}
	}
	if cur != nil {
		closeAt(ps[len(ps)-1].Done)
	}
	return out
}

// HolderChange is a change of the nodes that hold a VIP: from At, the VIP
// is on Holders (names, sorted) with their link up.
type HolderChange struct {
	At      time.Time
	Holders []string
}

// Holdings is the holder timeline of every VIP.
type Holdings map[netip.Addr][]HolderChange

// spans returns, for one VIP's changes up to end, the intervals in which
// keep accepts the number of holders.
func spans(cs []HolderChange, end time.Time, keep func(holders []string) bool) []Interval {
	var out []Interval
	for i, c := range cs {
		if !keep(c.Holders) {
			continue
		}
		to := end
		if i+1 < len(cs) {
			to = cs[i+1].At
		}
		if !to.After(c.At) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End.Equal(c.At) {
			out[n-1].End = to
			continue
		}
		out = append(out, Interval{c.At, to})
	}
	return out
}

// Doubles are the intervals in which the VIP was on two nodes or more.
func Doubles(cs []HolderChange, end time.Time) []Interval {
	return spans(cs, end, func(h []string) bool { return len(h) > 1 })
}

// Nones are the intervals in which no node held the VIP.
func Nones(cs []HolderChange, end time.Time) []Interval {
	return spans(cs, end, func(h []string) bool { return len(h) == 0 })
}

// HeldBy are the intervals in which node held the VIP (alone or not).
func HeldBy(cs []HolderChange, end time.Time, node string) []Interval {
	return spans(cs, end, func(h []string) bool { return slices.Contains(h, node) })
}

// HoldersAt returns the holders of the VIP at t.
func HoldersAt(cs []HolderChange, t time.Time) []string {
	var h []string
	for _, c := range cs {
		if c.At.After(t) {
			break
		}
		h = c.Holders
	}
	return h
}

// EntryAt returns the node the client's entry named at t ("" for none).
func EntryAt(es []EntryChange, t time.Time) string {
	node := ""
	for _, e := range es {
		if e.At.After(t) {
			break
		}
		node = e.Node
	}
	return node
}

// total is the summed length of the intervals, each clipped to [from, to].
func total(is []Interval, from, to time.Time) time.Duration {
	var sum time.Duration
	for _, i := range is {
		if c, ok := i.clip(from, to); ok {
			sum += c.Len()
		}
	}
	return sum
}

// subtract returns the parts of is that no interval of cut covers. cut
// must be sorted by start.
func subtract(is, cut []Interval) []Interval {
	var out []Interval
	for _, i := range is {
		parts := []Interval{i}
		for _, c := range cut {
			var next []Interval
			for _, p := range parts {
				if !p.Overlaps(c) {
					next = append(next, p)
					continue
				}
				if c.Start.After(p.Start) {
					next = append(next, Interval{p.Start, c.Start})
				}
				if c.End.Before(p.End) {
					next = append(next, Interval{c.End, p.End})
				}
			}
			parts = next
		}
		out = append(out, parts...)
	}
	return out
}

// intersect returns the parts of is that some interval of with covers.
func intersect(is, with []Interval) []Interval {
	var out []Interval
	for _, i := range is {
		for _, w := range with {
			if !i.Overlaps(w) {
				continue
			}
			s, e := i.Start, i.End
			if w.Start.After(s) {
				s = w.Start
			}
			if w.End.Before(e) {
				e = w.End
			}
			if e.After(s) {
				out = append(out, Interval{s, e})
			}
		}
	}
	return out
}

// merge sorts intervals and joins those that overlap.
func merge(is []Interval) []Interval {
	is = slices.Clone(is)
	slices.SortFunc(is, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	var out []Interval
	for _, i := range is {
		if n := len(out); n > 0 && !i.Start.After(out[n-1].End) {
			if i.End.After(out[n-1].End) {
				out[n-1].End = i.End
			}
			continue
		}
		out = append(out, i)
	}
	return out
}
