package chaos

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// Record is one fault as the nemesis carried it out.
type Record struct {
	Fault
	// Began is when the fault was injected, Ended when it was undone (the
	// link plugged back in, the programs started again...), Recovered when
	// its nodes were back: their programs ready (/readyz), or Ended for a
	// fault that stops nothing.
	Began, Ended, Recovered time.Time
	// Effective is when the fault took hold, when that is measured and
	// later than Began (a killed service's process reaped): the failover
	// cannot begin before, so a limit counts from it (see measure).
	Effective time.Time `json:",omitzero"`
	// Held are the VIPs the fault's nodes held when it began.
	Held []netip.Addr
	// Bound is the longest outage the VRRP timers allow the fault when it
	// runs alone (0: none, see Limit).
	Bound time.Duration
	// Advert is the longest advert interval in the nodes' keepalived.conf
	// when the fault began (0: not read; Data.Advert stands in).
	Advert time.Duration `json:",omitzero"`
	// Downs are the spans in which the fault left a node unable to hold a
	// VIP, by node index.
	Downs []NodeDown
	// Notes are anything that went other than planned.
	Notes []string
}

// NodeDown is a span in which a node could not hold a VIP.
type NodeDown struct {
	Node int
	Interval
}

// Data is everything a run recorded.
type Data struct {
	// Start and End bound the run's measured period: probes, holders and
	// faults within it.
	Start, End time.Time
	Nodes      []string
	VIPs       []netip.Addr
	// Probes are each VIP's probes, in the order of VIPs.
	Probes   [][]Probe
	Holdings Holdings
	// Entries are the client's neighbour entries of the VIPs.
	Entries Entries
	Records []Record
	// Allowance is how long after a fault's recovery its effects may
	// still show: preemption back to the returning node takes up to 3
	// advert intervals and its skew.
	Allowance time.Duration
	// Advert is the interval at which the fleet's VRRP instances sent
	// adverts: a backup takes over no sooner than three of them and its
	// skew after the holder's last advert (see Data.frozen). 0: unknown (a
	// recording made before it was kept), no handover is the node's
	// freeze.
	Advert time.Duration
	// Lead is how long before a fault's injection its window opens: a
	// probe in flight when the fault begins (sent up to its deadline
	// before) fails with it.
	Lead time.Duration
	// DupBound is how long a VIP may stay on two nodes after the faults
	// that split the cluster are over: the time the split-brain detector
	// needs to call it a duplicate.
	DupBound time.Duration
	// Stalls are the spans in which the client itself was stalled (see
	// Prober.Stalls), sorted and disjoint: a probe that timed out in
	// flight during one says nothing of its VIP, and no outage counts
	// the time in one.
	Stalls []Interval
	// Controls are the client's probes of each node's own IPv4 address,
	// by node index (see Hiccups).
	Controls [][]Probe
	// Controls6 are its probes of each node's own IPv6 address, by node
	// index: an IPv6 VIP's holders are judged by them (see Analyse).
	// They also keep every node's neighbour entry for the client's IPv6
	// address in use, as Controls keep its ARP entry, the way a real
	// node's entry for its gateway is: without them a node taking an
	// IPv6 VIP first resolves the client, and on a lossy segment a lost
	// solicitation costs the kernel's one-second retransmit.
	Controls6 [][]Probe
	// Unannounced are the VIPs the client followed to a node that listed
	// them before its kernel announced them (see unannouncedSpans).
	Unannounced Unannounced
}

// Window is the span in which an outage or a duplicate counts as the
// record's doing: from its start (less Lead) to its recovery plus the
// allowance.
func (d *Data) Window(r Record) Interval {
	return Interval{r.Began.Add(-d.Lead), r.Recovered.Add(d.Allowance)}
}

// Charge ties an outage or a duplicate to the fault it is charged to.
type Charge struct {
	// Record is the index of the record in Data.Records; -1 when no
	// fault's window contains the start (unexplained).
	Record int
	// Overlapped is set when several faults' windows contained it, or the
	// fault's window overlapped another's: no limit is held then.
	Overlapped bool
}

// Analysis is what a run shows.
type Analysis struct {
	VIPs  []VIPResult
	Kinds []KindResult
	// Violations are the limits broken.
	Violations []Violation
	// Isolated marks the records whose window overlapped no other's.
	Isolated []bool
	// Handovers are the times a VIP held by the node of a keep fault
	// (Keeps) was held otherwise during the fault or KeepAfter after it.
	Handovers []Handover
	// Kept counts the VIPs the nodes of keep faults held when they began:
	// the checks the handovers were found in.
	Kept int
	// Hiccups are the machine's hiccups (Data.Hiccups) outside the
	// client's stalls: no limit counts the time in one (availability
	// does).
	Hiccups []Interval
}

// Handover is a VIP of a keep fault's node held otherwise (by another
// node, by none, or twice) during the fault or KeepAfter after it.
type Handover struct {
	// Record is the keep fault's index in Data.Records.
	Record int
	VIP    netip.Addr
	// At is when it began (the fault's injection at the earliest), Len
	// how long of the fault and KeepAfter it lasted, Takers the other
	// nodes that held the VIP in it (none: the VIP had no holder).
	At     time.Time
	Len    time.Duration
	Takers []string
	// Excused is the index of another fault that explains it (its
	// window contains At, and it is the segment's, the API server's or
	// every node's, targets one of the takers (a node coming back takes
	// its VIPs back), or takes the starved node itself down); -1 when
	// none does.
	Excused int
	// Frozen is how long the fault's node had not answered the client at
	// its own addresses when another node took the VIP from it, when that
	// was at least two advert intervals (see Data.frozen) and it still
	// held the VIP: its whole userland had stopped, its checked service
	// with it, long enough for a backup to time out. Moving the VIP is
	// then the failover doing its job. 0 otherwise.
	Frozen time.Duration
}

// excused reports whether another fault or the node's freeze explains h;
// a handover neither explains is a false alarm.
func (h Handover) excused() bool { return h.Excused >= 0 || h.Frozen > 0 }

// VIPResult is one VIP's figures over the run.
type VIPResult struct {
	VIP netip.Addr
	// Probes is how many probes were sent, Failed how many failed.
	// Stalled is how many of the failed ones timed out in flight while
	// the client was stalled: not counted in any outage.
	Probes, Failed, Stalled int
	// Availability is the share of the run in no outage.
	Availability float64
	// Down is the summed length of the outages, less the time the client
	// was stalled in them.
	Down    time.Duration
	Outages []Outage
	Charges []Charge
	// Held are, per outage, the part held to a limit and the limit (see
	// measure); zero for an unexplained outage.
	Held     []Measure
	Doubles  []Interval
	DCharges []Charge
	// NoHolder is how long no node held the VIP; NoHolderHealthy how long
	// of that some node could have held it (no fault had taken it down).
	NoHolder, NoHolderHealthy time.Duration
	// Twice is how long the VIP was on two nodes or more.
	Twice time.Duration
}

// KindResult is one fault kind's figures.
type KindResult struct {
	Kind Kind
	// Faults is how many ran, Isolated how many of those overlapped no
	// other.
	Faults, Isolated int
	// Outages are the outages charged to faults of the kind, per VIP in
	// the order of Data.VIPs.
	Outages [][]time.Duration
	// Twice is how long VIPs sat on two nodes in the kind's faults, per
	// VIP.
	Twice []time.Duration
}

// Measure is an outage's part held to a limit, and the limit.
type Measure struct {
	Got, Limit time.Duration
}

// Violation is a limit a fault broke.
type Violation struct {
	Record int
	VIP    netip.Addr
	// What names the limit: "outage", "duplicate healed", "unexplained
	// outage", "unexplained duplicate".
	What       string
	Got, Limit time.Duration
	At         time.Time
}

func (v Violation) String(d *Data) string {
	at := fmtOffset(v.At.Sub(d.Start))
	if v.Record < 0 {
		return fmt.Sprintf("%s at %s on %s: %s with no fault to explain it", v.What, at, v.VIP, fmtDur(v.Got))
	}
	r := d.Records[v.Record]
	return fmt.Sprintf("fault #%d (%s) at %s on %s: %s %s, limit %s", r.Index, r.Describe(d.Nodes), at, v.VIP, v.What, fmtDur(v.Got), fmtDur(v.Limit))
}

// Analyse charges every outage and duplicate to a fault and holds the
// isolated faults to their limits.
//
// The rule for overlapping faults: an outage (a duplicate) is charged to
// the faults whose window (injection to recovery plus Allowance) contains
// its start; of several, to the one that began last, the latest change,
// and it is then marked overlapped. A fault is isolated when its window
// overlaps no other fault's. An outage must end within the most lenient
// bound of the faults whose windows it meets, counted from the later of
// its start and the last of them to begin (see measure); an outage in no
// window is unexplained and breaks the run. A duplicate must end within
// DupBound of the recovery of the last fault that was in progress during
// it.
func Analyse(d *Data) Analysis {
	inOrder(d.Holdings)
	a := Analysis{Isolated: make([]bool, len(d.Records))}
	wins := make([]Interval, len(d.Records))
	for i, r := range d.Records {
		wins[i] = d.Window(r)
	}
	for i := range d.Records {
		a.Isolated[i] = true
		for j := range d.Records {
			if i != j && wins[i].Overlaps(wins[j]) {
				a.Isolated[i] = false
				break
			}
		}
	}
	charge := func(t time.Time) Charge {
		c := Charge{Record: -1}
		n := 0
		for i := range d.Records {
			if !wins[i].Contains(t) {
				continue
			}
			n++
			if c.Record < 0 || d.Records[i].Began.After(d.Records[c.Record].Began) {
				c.Record = i
			}
		}
		c.Overlapped = n > 1 || (c.Record >= 0 && !a.Isolated[c.Record])
		return c
	}
	down := d.allDown()
	a.Hiccups = subtract(d.Hiccups(), d.Stalls)
	nodeDowns := d.nodeDowns()
	fails4, fails6 := d.controlFails(d.Controls), d.controlFails(d.Controls6)
	excused := merge(append(slices.Clone(d.Stalls), a.Hiccups...))
	byKind := map[Kind]*KindResult{}
	kindOf := func(k Kind) *KindResult {
		if byKind[k] == nil {
			byKind[k] = &KindResult{Kind: k, Outages: make([][]time.Duration, len(d.VIPs)), Twice: make([]time.Duration, len(d.VIPs))}
		}
		return byKind[k]
	}
	for i, r := range d.Records {
		kr := kindOf(r.Kind)
		kr.Faults++
		if a.Isolated[i] {
			kr.Isolated++
		}
	}
	for vi, vip := range d.VIPs {
		ps := d.Probes[vi]
		res := VIPResult{VIP: vip, Probes: len(ps)}
		for _, p := range ps {
			if !p.OK {
				res.Failed++
			}
		}
		judged, stalled := d.outsideStalls(ps)
		res.Stalled = stalled
		controls, controlFails := d.Controls, fails4
		if vip.Is6() && len(d.Controls6) == len(d.Nodes) {
			controls, controlFails = d.Controls6, fails6
		}
		silent := subtract(d.silentSpans(vip, controlFails, nodeDowns), excused)
		excusedOrSilent := merge(append(slices.Clone(excused), silent...))
		unannounced := subtract(d.unannouncedSpans(vip), excusedOrSilent)
		// accounted is the time already left out of the limits: a slow
		// answer counts only outside it.
		accounted := merge(append(excusedOrSilent, unannounced...))
		for _, o := range Outages(judged) {
			o2, ok := o.clip(d.Start, d.End)
			if !ok {
				continue
			}
			o.Interval = o2
			o.Stalled = total(d.Stalls, o.Start, o.End)
			o.Hiccup = total(a.Hiccups, o.Start, o.End)
			o.Silent = total(silent, o.Start, o.End)
			o.Unannounced = total(unannounced, o.Start, o.End)
			var slow []Interval
			if d.atDeadline(vip, o, judged, controls, nodeDowns) {
				slow = subtract([]Interval{o.Interval}, accounted)
			} else if tail, ok := d.slowTail(o, controls); ok {
				slow = subtract([]Interval{tail}, accounted)
			}
			o.Slow = total(slow, o.Start, o.End)
			mid := o.Start.Add(o.Len() / 2)
			if e := EntryAt(d.Entries[vip], mid); e != "" && !slices.Contains(HoldersAt(d.Holdings[vip], mid), e) {
				o.Stranded = e
			}
			o.Mute = d.muteHolders(controlFails, nodeDowns, vip, mid)
			c := charge(o.Start)
			res.Outages = append(res.Outages, o)
			res.Charges = append(res.Charges, c)
			// What the client saw: only its own stalls are left out.
			res.Down += o.Len() - o.Stalled
			if c.Record < 0 {
				res.Held = append(res.Held, Measure{})
				// One wholly in the client's stalls, the machine's
				// hiccups and its holders' silence is not the VIP's to
				// explain.
				if o.Counted() > 0 {
					a.Violations = append(a.Violations, Violation{Record: -1, VIP: vip, What: "unexplained outage", Got: o.Counted(), At: o.Start})
				}
				continue
			}
			r := d.Records[c.Record]
			kr := kindOf(r.Kind)
			kr.Outages[vi] = append(kr.Outages[vi], o.Len())
			got, limit := d.measure(o.Interval, wins)
			// The client's stalls, the machine's hiccups, the holders'
			// silence, a kernel's late announcement and the answering
			// node's slowness in the held part are not the VIP's.
			from := o.End.Add(-got)
			got -= total(d.Stalls, from, o.End) + total(a.Hiccups, from, o.End) + total(silent, from, o.End) +
				total(unannounced, from, o.End) + total(slow, from, o.End)
			res.Held = append(res.Held, Measure{got, limit})
			if got > limit {
				a.Violations = append(a.Violations, Violation{Record: c.Record, VIP: vip, What: "outage", Got: got, Limit: limit, At: o.Start})
			}
		}
		if span := d.End.Sub(d.Start); span > 0 {
			res.Availability = 1 - float64(res.Down)/float64(span)
		}
		cs := d.Holdings[vip]
		for _, dbl := range Doubles(cs, d.End) {
			dbl, ok := dbl.clip(d.Start, d.End)
			if !ok {
				continue
			}
			c := charge(dbl.Start)
			res.Doubles = append(res.Doubles, dbl)
			res.DCharges = append(res.DCharges, c)
			res.Twice += dbl.Len()
			if c.Record >= 0 {
				kindOf(d.Records[c.Record].Kind).Twice[vi] += dbl.Len()
			}
			if heal, last := d.healTime(dbl); heal > d.DupBound {
				what := "duplicate healed"
				if last < 0 {
					what = "unexplained duplicate"
				}
				a.Violations = append(a.Violations, Violation{Record: last, VIP: vip, What: what, Got: heal, Limit: d.DupBound, At: dbl.Start})
			}
		}
		nones := Nones(cs, d.End)
		res.NoHolder = total(nones, d.Start, d.End)
		res.NoHolderHealthy = total(subtract(nones, down), d.Start, d.End)
		a.VIPs = append(a.VIPs, res)
	}
	for ri, r := range d.Records {
		if !Keeps(r.Kind) || len(r.Nodes) != 1 || r.Nodes[0] >= len(d.Nodes) {
			continue
		}
		frozen := d.frozen(r.Nodes[0], fails4, fails6)
		for _, v := range r.Held {
			a.Kept++
			for _, h := range d.handovers(ri, v, wins, frozen) {
				a.Handovers = append(a.Handovers, h)
				if !h.excused() {
					a.Violations = append(a.Violations, Violation{Record: ri, VIP: v, What: fmt.Sprintf("handover to %v", h.Takers), Got: h.Len, At: h.At})
				}
			}
		}
	}
	for _, k := range allKinds() {
		if kr := byKind[k]; kr != nil {
			a.Kinds = append(a.Kinds, *kr)
			delete(byKind, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		a.Kinds = append(a.Kinds, *byKind[k])
	}
	return a
}

// inOrder makes every VIP's holder changes' moments never go back: the
// list's order is the order in which the observer applied them, and
// before 2026-11-28 it timed a change before it took its lock, so a
// change applied later could carry an earlier moment (a node's address
// added and another's removed in the same millisecond).
func inOrder(h Holdings) {
	for _, cs := range h {
		for i := 1; i < len(cs); i++ {
			if cs[i].At.Before(cs[i-1].At) {
				cs[i].At = cs[i-1].At
			}
		}
	}
}

// handovers lists the spans in which v, held by the node of the keep fault
// d.Records[ri] when it began, was not held by that node alone, from the
// injection to KeepAfter after the fault was undone, each excused or not
// by another fault whose window (wins) contains its start, or by the
// node's freeze: frozen tells how long the node had been silent at a
// moment (see Data.frozen), and a span that began with the node still
// holding the VIP beside another (a frozen node keeps its addresses; one
// that removed the VIP was running) when it had been silent at least two
// advert intervals (the fault's Record.Advert, else Data.Advert) is the
// freeze's.
func (d *Data) handovers(ri int, v netip.Addr, wins []Interval, frozen func(time.Time) time.Duration) []Handover {
	r := d.Records[ri]
	holder := d.Nodes[r.Nodes[0]]
	span := Interval{r.Began, r.Ended.Add(KeepAfter)}
	if span.End.After(d.End) {
		span.End = d.End
	}
	cs := d.Holdings[v]
	var out []Handover
	for _, iv := range spans(cs, d.End, func(h []string) bool { return len(h) != 1 || h[0] != holder }) {
		// When the VIP moved: a span under way at the injection began
		// before it.
		moved := iv.Start
		iv, ok := iv.clip(span.Start, span.End)
		if !ok {
			continue
		}
		h := Handover{Record: ri, VIP: v, At: iv.Start, Len: iv.Len(), Takers: []string{}, Excused: -1}
		take := func(hs []string) {
			for _, n := range hs {
				if n != holder && !slices.Contains(h.Takers, n) {
					h.Takers = append(h.Takers, n)
				}
			}
		}
		take(HoldersAt(cs, iv.Start))
		for _, c := range cs {
			if c.At.After(iv.Start) && !c.At.After(iv.End) {
				take(c.Holders)
			}
		}
		for j, o := range d.Records {
			if j == ri || !wins[j].Contains(h.At) {
				continue
			}
			info := kinds[o.Kind]
			// The segment's, the API server's or every node's fault; one
			// of a taker (a node coming back takes its VIPs back); or one
			// that took the starved node itself down (killed, cut, ...).
			if info.nodes == 0 || info.all || slices.ContainsFunc(o.Nodes, func(n int) bool { return n < len(d.Nodes) && slices.Contains(h.Takers, d.Nodes[n]) }) ||
				info.down && slices.Contains(o.Nodes, r.Nodes[0]) {
				h.Excused = j
				break
			}
		}
		advert := r.Advert
		if advert == 0 {
			advert = d.Advert
		}
		if h.Excused < 0 && advert > 0 && slices.Contains(HoldersAt(cs, moved), holder) {
			if f := frozen(moved); f >= 2*advert {
				h.Frozen = f
			}
		}
		out = append(out, h)
	}
	return out
}

// frozen returns how long node n had gone without answering the client
// at its own addresses at a moment: the span of silence that contains it
// (controlFails' in IPv4, fails4, or in IPv6 when the client probed only
// that; less the client's own stalls, which silence every node), from the
// node's last answer in either family before the moment when that came
// later than the span's start (a node whose userland stopped answers
// neither; an outage starts at its first failed probe's sending, which a
// late answer to an earlier probe may follow). 0 when it answered then.
//
// A backup takes the VIPs of a holder whose adverts stop no sooner than
// its master-down interval (three adverts and a skew) after the last one
// it heard, which the holder sent at most one advert interval before it
// stopped: a node that stopped and lost its VIPs for it had been silent at
// least two advert intervals when they were taken.
func (d *Data) frozen(n int, fails4, fails6 [][]Interval) func(time.Time) time.Duration {
	var silent []Interval
	var controls [][]Probe
	probed4 := n < len(fails4)
	if probed4 {
		silent, controls = fails4[n], append(controls, d.Controls[n])
	}
	if len(d.Controls6) == len(d.Nodes) && n < len(fails6) {
		if !probed4 {
			silent = fails6[n]
		}
		controls = append(controls, d.Controls6[n])
	}
	silent = subtract(silent, d.Stalls)
	return func(t time.Time) time.Duration {
		for _, s := range silent {
			if s.Start.After(t) || s.End.Before(t) {
				continue
			}
			from := s.Start
			for _, ps := range controls {
				for _, p := range ps {
					if p.OK && p.Done.After(from) && !p.Done.After(t) {
						from = p.Done
					}
				}
			}
			return t.Sub(from)
		}
		return 0
	}
}

// outsideStalls returns ps without the probes that timed out in flight
// while the client was stalled, and how many it left out: a client that
// did not run cannot have read an answer in time. A refusal, a reset or a
// timeout in flight at no stall stays.
func (d *Data) outsideStalls(ps []Probe) ([]Probe, int) {
	if len(d.Stalls) == 0 {
		return ps, 0
	}
	out := make([]Probe, 0, len(ps))
	left := 0
	for _, p := range ps {
		flight := Interval{p.Sent, p.Done}
		if !p.OK && p.Err == "timeout" && slices.ContainsFunc(d.Stalls, flight.Overlaps) {
			left++
			continue
		}
		out = append(out, p)
	}
	return out, left
}

// measure holds an outage to the faults in progress: it must end within
// the most lenient bound of the faults whose windows contain its start. A
// change while the outage is still within that limit starts the count
// again: a fault that begins (the backup about to take over dies too,
// with its own bound if more lenient) or one that is undone (a frozen node
// resumes, a node comes back: VRRP sorts the VIPs out anew), and its
// nodes' recovery (Record.Recovered: a node whose service came back is a
// backup only once its check passes again). Alone, that
// is the fault's own bound on the outage's length. A fault in progress
// that took hold after the outage began (Record.Effective) starts the
// count when it did. A segment that delayed the VRRP adverts during the
// held part adds its delay and jitter to the limit (see transit). It
// returns the part of the outage held to the limit, and the limit.
func (d *Data) measure(o Interval, wins []Interval) (got, limit time.Duration) {
	from := o.Start
	for i, r := range d.Records {
		if wins[i].Contains(o.Start) {
			limit = max(limit, r.Bound)
			// Nothing could fail over before the fault took hold.
			if r.Effective.After(from) && r.Effective.Before(o.End) {
				from = r.Effective
			}
		}
	}
	type change struct {
		at    time.Time
		bound time.Duration
	}
	var changes []change
	for _, r := range d.Records {
		changes = append(changes, change{r.Began, r.Bound}, change{r.Ended, r.Bound}, change{r.Recovered, r.Bound})
	}
	slices.SortFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
	for _, c := range changes {
		if c.at.After(from) && c.at.Before(o.End) && !c.at.After(from.Add(limit)) {
			from, limit = c.at, max(limit, c.bound)
		}
	}
	return o.End.Sub(from), limit + d.transit(Interval{from, o.End})
}

// transit is how much later than on a quiet segment a failover can end
// within iv: the longest delay and jitter of the segment faults in
// progress then. The bounds assume adverts that arrive at once; a segment
// that holds every IP packet back (the VRRP adverts among them; ARP and
// neighbour discovery are not delayed) makes the backups hear the last
// advert of a holder that is gone that much later, so their master-down
// timers, and the handover, end that much later too. A double master
// among backups that did not hear each other in time costs more and is
// not excused.
func (d *Data) transit(iv Interval) time.Duration {
	var worst time.Duration
	for _, r := range d.Records {
		if r.Kind == Segment && (Interval{r.Began, r.Ended}).Overlaps(iv) {
			worst = max(worst, r.Delay+r.Jitter)
		}
	}
	return worst
}

// healTime is how long dbl outlived the recovery of the last fault in
// progress during it (the whole of dbl when none was), and that fault's
// index (-1: none).
func (d *Data) healTime(dbl Interval) (time.Duration, int) {
	last := -1
	var over time.Time
	for i, r := range d.Records {
		if !(Interval{r.Began, r.Recovered}).Overlaps(dbl) {
			continue
		}
		if last < 0 || r.Recovered.After(over) {
			last, over = i, r.Recovered
		}
	}
	if last < 0 {
		return dbl.Len(), -1
	}
	if over.Before(dbl.Start) {
		over = dbl.Start
	}
	return dbl.End.Sub(over), last
}

// allDown are the spans in which every node was down: no node could have
// held a VIP.
func (d *Data) allDown() []Interval {
	per := make([][]Interval, len(d.Nodes))
	for _, r := range d.Records {
		for _, nd := range r.Downs {
			if nd.Node < len(per) {
				per[nd.Node] = append(per[nd.Node], nd.Interval)
			}
		}
	}
	all := merge(per[0])
	for _, is := range per[1:] {
		all = merge(intersect(all, merge(is)))
	}
	return all
}
