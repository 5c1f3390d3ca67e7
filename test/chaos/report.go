package chaos

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/test/bench"
)

// fmtDur prints a duration as milliseconds below a second, seconds with
// milliseconds above.
func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
	}
	return fmt.Sprintf("%.3f s", d.Seconds())
}

// WriteMarkdown writes the run's report: the verdict, the figures per
// fault kind and per VIP, the limits, the invariants, the pictures and the
// faults one by one, and how it was all measured.
func WriteMarkdown(w io.Writer, o Options, target string, settings []string, res *Result) error {
	d, a := res.Data, &res.Analysis
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	verdict := "PASS"
	if !res.Pass() {
		verdict = "FAIL"
	}
	p("# Chaos run: seed %d, %s, %s: %s", res.Schedule.Seed, res.Schedule.Duration, target, verdict)
	p("")
	p("Replay: `make chaos SEED=%d DURATION=%s%s` (schedule digest `%s`; the same seed draws the same %d faults).",
		res.Schedule.Seed, res.Schedule.Duration, replayArgs(o), res.Schedule.Digest(), len(res.Schedule.Faults))
	p("ipfailover %s on %d nodes (%s); VIPs %s; every node's environment: `%s`.",
		o.Commit, len(d.Nodes), strings.Join(d.Nodes, ", "), vipList(d.VIPs), strings.Join(settings, " "))
	p("Measured over %s from %s UTC: a client in its own namespace opened a TCP connection to every VIP every %s (an HTTP request answered with the node's name within %s counts); the holders are the nodes' kernels' (netlink notifications: the VIP on the node's link, the link up).",
		fmtDur(d.End.Sub(d.Start)), d.Start.UTC().Format("2006-01-02 15:04:05.000"), ProbeInterval, ProbeDeadline)
	if len(res.Load) > 0 {
		p("The machine's load average (1 minute) during the run: %.1f–%.1f on %d cores; the lab shares them with whatever else runs.", slices.Min(res.Load), slices.Max(res.Load), runtime.NumCPU())
	}
	p("%s", stallText(d, a))
	p("%s", hiccupText(d, a))
	p("")

	if !res.Pass() {
		p("## What failed")
		p("")
		for _, v := range a.Violations {
			p("- %s", v.String(d))
		}
		for _, pr := range res.Problems {
			p("- %s", pr)
		}
		for _, c := range res.Checks {
			if !c.OK {
				p("- invariant: %s: %s", c.Name, c.Detail)
			}
		}
		p("")
	}

	p("## Per fault kind")
	p("")
	p("Outages charged to the kind's faults (see the rule below), per VIP: how many, the median and the longest; and how long VIPs sat on two nodes during them.")
	p("")
	p("| fault kind | faults | alone | VIP | outages | median | longest | on two nodes | limit (alone) |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, k := range a.Kinds {
		for vi, v := range d.VIPs {
			os := k.Outages[vi]
			med, longest := "-", "-"
			if len(os) > 0 {
				med, longest = fmtDur(bench.Median(os)), fmtDur(bench.Worst(os))
			}
			kind, faults, alone, lim := "", "", "", ""
			if vi == 0 {
				kind, faults, alone, lim = string(k.Kind), fmt.Sprint(k.Faults), fmt.Sprint(k.Isolated), limitText(k.Kind, d)
			}
			p("| %s | %s | %s | %s | %d | %s | %s | %s | %s |", kind, faults, alone, v, len(os), med, longest, fmtDur(k.Twice[vi]), lim)
		}
	}
	p("")

	p("## Per VIP, over the run")
	p("")
	p("| VIP | availability | down | outages | longest | probes failed | no holder | no holder while a node could hold it | on two nodes |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, r := range a.VIPs {
		var longest time.Duration
		for _, o := range r.Outages {
			longest = max(longest, o.Len())
		}
		p("| %s | %.3f %% | %s | %d | %s | %d of %d | %s | %s | %s |", r.VIP, r.Availability*100, fmtDur(r.Down), len(r.Outages), fmtDur(longest),
			r.Failed, r.Probes, fmtDur(r.NoHolder), fmtDur(r.NoHolderHealthy), fmtDur(r.Twice))
	}
	p("")

	p("## Limits from the timers")
	p("")
	p("Every outage is held to the most lenient bound of the faults whose windows contain its start, counted from the last change (a fault begun, undone, or its nodes back) while the outage was still within that bound (alone: the fault's own bound on the outage's length); by the class of the fault it is charged to:")
	p("")
	for _, lim := range []Limit{Graceful, FailedCheck, DeadNode} {
		checked, alone, broken := 0, 0, 0
		var worst time.Duration
		var bounds []time.Duration
		for vi := range d.VIPs {
			r := a.VIPs[vi]
			for oi := range r.Outages {
				c := r.Charges[oi]
				if c.Record < 0 || LimitOf(d.Records[c.Record].Kind) != lim {
					continue
				}
				m := r.Held[oi]
				checked++
				if !c.Overlapped {
					alone++
				}
				worst = max(worst, m.Got)
				bounds = append(bounds, m.Limit)
				if m.Got > m.Limit {
					broken++
				}
			}
		}
		if checked == 0 {
			p("- %s (%s): no outage", lim, kindsWhere(func(k Kind) bool { return LimitOf(k) == lim }))
			continue
		}
		p("- %s (%s): %d outages (%d of faults alone), the longest held part %s, limits %s: %s", lim, kindsWhere(func(k Kind) bool { return LimitOf(k) == lim }), checked, alone, fmtDur(worst), boundRange(bounds), okText(broken == 0, fmt.Sprintf("%d over", broken)))
	}
	dups, dupBroken := 0, 0
	var dupWorst time.Duration
	for _, r := range a.VIPs {
		for _, dbl := range r.Doubles {
			dups++
			heal, _ := d.healTime(dbl)
			dupWorst = max(dupWorst, heal)
			if heal > d.DupBound {
				dupBroken++
			}
		}
	}
	p("- duplicate healed: %d times a VIP sat on two nodes, the longest %s past the end of the faults in progress, limit %s (the split-brain detector's: a first round of 2 s and a confirming one of 1 s): %s",
		dups, fmtDur(dupWorst), fmtDur(d.DupBound), okText(dupBroken == 0, fmt.Sprintf("%d over", dupBroken)))
	p("%s", keptText(d, a))
	unexplained := 0
	for _, v := range a.Violations {
		if v.Record < 0 {
			unexplained++
		}
	}
	p("- outages and duplicates no fault explains: %s", okText(unexplained == 0, fmt.Sprintf("%d", unexplained)))
	p("")

	if len(d.Stalls) > 0 {
		p("## Client stalls")
		p("")
		p("Gaps of more than %s (%d probe intervals) between two rounds of the client's probes, the longest first (up to 20): the harness did not run then. Timeouts of probes in flight during one are not counted; outages exclude the stalled time.", fmtDur(StallAfter*ProbeInterval), StallAfter)
		p("")
		spanTable(p, d, a, "stalled", d.Stalls)
	}
	if len(a.Hiccups) > 0 {
		p("## Machine hiccups")
		p("")
		p("Spans in which no node's own address answered the client either (every node no fault had taken down, at least two, and no segment fault), outside the client's stalls, the longest first (up to 20): the machine did not run the nodes' services or their network then. The limits leave the time in them out.")
		p("")
		spanTable(p, d, a, "no node answered", a.Hiccups)
	}

	p("## Invariants at the end")
	p("")
	for _, c := range res.Checks {
		mark := "ok"
		if !c.OK {
			mark = "**FAILED**"
		}
		detail := ""
		if c.Detail != "" {
			detail = ": " + c.Detail
		}
		p("- %s %s%s", mark, c.Name, detail)
	}
	p("")

	p("## Timelines")
	p("")
	p("One picture per VIP: which node held it (a row per node), when it sat on two nodes (orange), what the client saw (green answered, red outages, drawn at least 2 pixels wide; a dark band along the foot where the client itself stalled), and the faults (from injection to the nodes' recovery, stacked while they overlap).")
	p("")
	for i, path := range res.Pictures {
		p("![%s](%s)", d.VIPs[i], filepath.Base(path))
		p("")
	}

	p("## The faults")
	p("")
	p("Times from the start of the measurement. Planned: the schedule; began, over, back: when the nemesis injected it, undid it, and its nodes were ready again. Outages per VIP charged to it (* overlapped).")
	p("")
	p("| # | planned | began | over | back | fault | held | limit | outages | notes |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	for ri, r := range d.Records {
		var outs []string
		for vi, v := range d.VIPs {
			if s := outagesOf(a.VIPs[vi], ri); s != "" {
				outs = append(outs, shortVIP(v)+" "+s)
			}
		}
		lim := "-"
		if r.Bound > 0 {
			lim = fmtDur(r.Bound)
		}
		p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |", r.Index, fmtOffset(r.Start), fmtOffset(r.Began.Sub(d.Start)), fmtOffset(r.Ended.Sub(d.Start)),
			fmtOffset(r.Recovered.Sub(d.Start)), r.Describe(d.Nodes), vipList(r.Held), lim, strings.Join(outs, ", "), strings.Join(append(slices.Clone(r.Notes), handoverNotes(d, a, ri)...), "; "))
	}
	p("")

	p("## How it is measured")
	p("")
	p("- **Outage**: a run of failed probes of one VIP, from the first failed probe's start to the quickest answer of the probes that succeeded after it (a probe sent later can be answered sooner, when the first went a slower way, such as through the old holder, which forwards it), less the round trip of the last answer before the outage (an answer that arrives late, once the VIP is back, does not shorten it; a slow path does not lengthen it). Availability is the share of the measured time in no outage.")
	p("- **Client stalled**: a gap of more than %s between two rounds of the client's probes (the machine did not run the harness). A probe that timed out in flight during a stall is left out (the client could not read its answer), and the stalled time within an outage counts neither in the down time nor against a limit. The checked service each node serves is a program of the node's own, so a stall of the harness cannot stop it from answering.", fmtDur(StallAfter*ProbeInterval))
	p("- **Machine hiccup**: a span in which the client's probes of every node's own address (its IPv4 address: the same service on the same port, an address that never moves) failed too, or waited more than %s with no answer, for every node that no fault had silenced (%s, from the injection less a probe's deadline to the recovery), at least two of them, outside any segment fault's window. The VIPs' outages within it are the machine's, not the failover's: their time there does not count against a limit (availability, what the client saw, keeps it).", fmtDur(silenceAfter), kindsWhere(Mutes))
	p("- **Silent holder**: a span in which the VIP had a holder, the client's neighbour entry sent to it, no fault had silenced it (%s: the faults that stop its own address answering), and it did not answer the client's probes of its own address (in the VIP's family) either: they timed out, or they waited more than %s with no answer (a node that stops and then answers its backlog at once, within the deadline) (within a segment fault's window, whose losses fail both, for at least %s in a row); a holder that a fault silenced, not sent to, does not stand in the way. The VIP was where VRRP and the client agreed it was and the node did not answer (starved of CPU, its kernel busy): no failover mends that. The time does not count against a limit (availability keeps it); the outage names the holder. A fault that keeps its node's VIPs (cpu-starve) is still held to no handover.", kindsWhere(Mutes), fmtDur(silenceAfter), segmentSilence)
	p("- **Kernel late**: a span in which the client's neighbour entry sent to a node that listed the VIP on its running link (an address dump, read when the entry changed) while its kernel had not announced it (no RTM_NEWADDR yet). keepalived adds IPv6 VIPs without duplicate address detection; Linux then leaves the announcement and the address's local route, without which the node does not take the packets, to a work item of its own, which a busy machine runs late (on the lab's one kernel, a node starved of CPU delays every node's). VRRP had moved the VIP and the client had followed; no failover hurries the kernel. The time does not count against a limit (availability keeps it). It ends when the node announces the VIP or the client's entry names another node.")
	p("- **Slow answer**: an outage ends with the answer to its first answered probe, less the answer time before the outage; a node slow to answer anything (starved, a backlog of connections after a silence) stretches that end. When the answering node's own address (in the VIP's family), probed in the same round, answered that slowly too, the outage's end past the VIP's answer less the node's own answer time is the node's slowness and does not count against a limit (availability keeps it). So is a whole outage no longer than %s whose probes all timed out while the client sent to the node that held the VIP (neither changing while the probe was in flight), no fault silenced it and the segment was whole, and its own address, probed within %s of each, answered in no less than %s: a node answering everything at the deadline's edge, some probes just past it.", fmtDur(ProbeDeadline), fmtDur(ProbeInterval), fmtDur(ProbeDeadline-ProbeInterval))
	p("- **Held**: the VIP is on a node's link and the link is up with its carrier; **on two nodes** when two hold it (a frozen node or a dead node's kernel still answers for its addresses); **no holder while a node could hold it**: no node holds it and at least one node is not down by a fault (killed, frozen, cut, its service or ipfailover stopped, until it is ready again).")
	p("- **Charging, when faults overlap**: a fault's window runs from its injection (less a probe's deadline: a probe in flight then fails with it) to its nodes' recovery plus %s (3 advert intervals and a second: the returning node takes its VIPs back). An outage or a double holding is charged to the fault whose window contains its start; of several, to the one that began last (the latest change), and marked overlapped. A fault is *alone* when its window overlaps no other's. An outage in no window is unexplained and fails the run.", fmtDur(d.Allowance))
	p("- **Limits**: a graceful handover (SIGTERM of ipfailover, a rollout) %s; a failed check (the service stopped) the check's period + %d retries + the best backup's skew + %s; a dead node (killed, frozen, cut, keepalived killed) and a node deaf to adverts (a partition, the segment) 3 advert intervals + the best backup's skew + %s; overlapping faults: the most lenient of their bounds, from the last change (a fault begun, undone, or its nodes back) while the outage was within it; while the segment delays packets, each limit grows by its delay and jitter (the backups hear a gone holder's last advert that much later). A VIP on two nodes must be on one again within %s of the recovery of the last fault in progress during it.",
		fmtDur(GracefulBound), 8, fmtDur(limitMargin), fmtDur(limitMargin), fmtDur(d.DupBound))
	p("- **No handover** (%s): every VIP the fault's node held when it began must be held by that node alone until %s after the fault is undone; a span in which it was not is excused only by another fault whose window contains its start and that is the segment's, the API server's or every node's, targets a node that took the VIP in that span (a node coming back takes its VIPs back), or takes the starved node itself down (killed, frozen, cut); or by the node's freeze: when another node took the VIP, the node still held it and had not answered the client at its own addresses (the checked service, a program of the node's own outside ipfailover's pod; both families, from its last answer in either, the client's stalls left out) for at least two advert intervals (the longest advert_int in the nodes' keepalived.conf when the fault began; else %s). A backup takes over no sooner than three adverts and its skew after the last advert it heard, sent at most one interval before the holder stopped: a node whose whole userland stopped that long (a 2-core host running three machines, their control plane and the client) had lost its VIPs by VRRP's own rule, and moving them is the failover doing its job. Such handovers are listed with the silence.", kindsWhere(Keeps), fmtDur(KeepAfter), advertText(d.Advert))
	p("- **Segment**: this kernel has no `tc netem` (CONFIG_NET_SCH_NETEM is off): loss is an nftables rule in the bridge that drops that share of every frame it forwards, delay and reordering a netfilter queue in the bridge that holds each IPv4 and IPv6 packet for delay ± jitter (ARP and neighbour discovery are lost but not delayed).")
	_, err := io.WriteString(w, b.String())
	return err
}

// outagesOf describes the outages of a VIP charged to record ri: each of
// up to three, or how many, the longest and their sum.
func outagesOf(vr VIPResult, ri int) string {
	var os []Outage
	overlapped := false
	for oi, o := range vr.Outages {
		if c := vr.Charges[oi]; c.Record == ri {
			os = append(os, o)
			overlapped = overlapped || c.Overlapped
		}
	}
	if len(os) == 0 {
		return ""
	}
	mark := ""
	if overlapped {
		mark = "*"
	}
	why := func(o Outage) string {
		w := o.Reason
		if o.Stranded != "" {
			w += ", the client sending to " + o.Stranded
		}
		if o.Stalled > 0 {
			w += ", the client stalled " + fmtDur(o.Stalled) + " of it"
		}
		if len(o.Mute) > 0 {
			w += ", its holder " + strings.Join(o.Mute, "+") + " silent at its own address too"
		}
		if o.Silent > 0 {
			w += " (" + fmtDur(o.Silent) + " of it not held to the limit)"
		}
		if o.Unannounced > 0 {
			w += ", " + fmtDur(o.Unannounced) + " of it the kernel late to announce the VIP the client was sent to (not held to the limit)"
		}
		if o.Hiccup > 0 {
			w += ", the machine hiccuped " + fmtDur(o.Hiccup) + " of it (not held to the limit)"
		}
		if o.Slow > 0 {
			w += ", its last " + fmtDur(o.Slow) + " " + o.Back.Node + "'s slow answer (not held to the limit)"
		}
		return w
	}
	if len(os) <= 3 {
		var s []string
		for _, o := range os {
			s = append(s, fmt.Sprintf("%s (%s)", fmtDur(o.Len()), why(o)))
		}
		return strings.Join(s, ", ") + mark
	}
	longest := os[0]
	var sum time.Duration
	for _, o := range os {
		sum += o.Len()
		if o.Len() > longest.Len() {
			longest = o
		}
	}
	return fmt.Sprintf("%d outages%s, the longest %s (%s), %s in all", len(os), mark, fmtDur(longest.Len()), why(longest), fmtDur(sum))
}

// spanTable writes a table of spans (the longest first, up to 20) and the
// outages each fell in.
func spanTable(p func(string, ...any), d *Data, a *Analysis, what string, spans []Interval) {
	p("| at | %s | outages it fell in |", what)
	p("|---|---|---|")
	spans = slices.Clone(spans)
	slices.SortStableFunc(spans, func(x, y Interval) int { return cmp.Compare(y.Len(), x.Len()) })
	for _, sp := range spans[:min(len(spans), 20)] {
		var in []string
		for _, r := range a.VIPs {
			for _, o := range r.Outages {
				if o.Overlaps(sp) {
					in = append(in, fmt.Sprintf("%s at %s", shortVIP(r.VIP), fmtOffset(o.Start.Sub(d.Start))))
				}
			}
		}
		p("| %s | %s | %s |", fmtOffset(sp.Start.Sub(d.Start)), fmtDur(sp.Len()), strings.Join(in, ", "))
	}
	p("")
}

// hiccupText says how often the machine hiccuped and what that took out of
// the figures.
func hiccupText(d *Data, a *Analysis) string {
	if len(d.Controls) == 0 {
		return "The nodes' own addresses were not probed: no machine hiccups or silent holders are told apart."
	}
	var inHiccups, silent, late, slow time.Duration
	n, nLate, nSlow := 0, 0, 0
	for _, r := range a.VIPs {
		for _, o := range r.Outages {
			inHiccups += o.Hiccup
			silent += o.Silent
			late += o.Unannounced
			slow += o.Slow
			if o.Silent > 0 {
				n++
			}
			if o.Unannounced > 0 {
				nLate++
			}
			if o.Slow > 0 {
				nSlow++
			}
		}
	}
	text := "The machine never hiccuped: at no moment did every node's own address fail the client at once (see Machine hiccups)."
	if len(a.Hiccups) > 0 {
		longest := slices.MaxFunc(a.Hiccups, func(x, y Interval) int { return cmp.Compare(x.Len(), y.Len()) })
		text = fmt.Sprintf("The machine hiccuped %d times (the client probed every node's own address as well, every %s: no node a fault had not taken down answered there either; the longest %s at %s, %s in all): the outages' %s within hiccups is not held against the limits (see Machine hiccups).",
			len(a.Hiccups), ProbeInterval, fmtDur(longest.Len()), fmtOffset(longest.Start.Sub(d.Start)), fmtDur(total(a.Hiccups, d.Start, d.End)), fmtDur(inHiccups))
	}
	return text + fmt.Sprintf(" In %d outages the VIP's holder, which no fault had taken down and to which the client was sending, did not answer at its own address either: their %s then is not held against the limits (see Silent holder). In %d outages the client was sent to a node whose kernel listed the VIP but had not yet announced it: their %s then is not held against the limits (see Kernel late). %d outages ended in an answer no slower than the node's own answer at its address in the same round: their last %s, that node's slowness, is not held against the limits either (see Slow answer). Availability leaves out none of these: it is what the client saw.", n, fmtDur(silent), nLate, fmtDur(late), nSlow, fmtDur(slow))
}

// stallText says how often the client stalled and what that took out of
// the figures.
func stallText(d *Data, a *Analysis) string {
	gap := fmtDur(StallAfter * ProbeInterval)
	if len(d.Stalls) == 0 {
		return fmt.Sprintf("The client never stalled: no gap of more than %s between two rounds of its probes.", gap)
	}
	longest := slices.MaxFunc(d.Stalls, func(x, y Interval) int { return cmp.Compare(x.Len(), y.Len()) })
	timeouts := 0
	var inOutages time.Duration
	for _, r := range a.VIPs {
		timeouts += r.Stalled
		for _, o := range r.Outages {
			inOutages += o.Stalled
		}
	}
	return fmt.Sprintf("The client itself stalled %d times (a gap of more than %s between two rounds of its probes; the longest %s at %s, %s in all): the %d probes that timed out in flight then are not counted, and the outages' %s within stalls is not counted as the VIPs' (see Client stalls).",
		len(d.Stalls), gap, fmtDur(longest.Len()), fmtOffset(longest.Start.Sub(d.Start)), fmtDur(total(d.Stalls, d.Start, d.End)), timeouts, fmtDur(inOutages))
}

// replayArgs are the make variables beyond SEED and DURATION that replay
// the run: the target and the advert interval.
func replayArgs(o Options) string {
	s := ""
	if o.Target == "kube" {
		s += " TARGET=kube"
	}
	if o.AdvertInterval != "" {
		s += " ADVERT_INTERVAL=" + o.AdvertInterval
	}
	return s
}

func vipList(vs []netip.Addr) string {
	if len(vs) == 0 {
		return "-"
	}
	var s []string
	for _, v := range vs {
		s = append(s, v.String())
	}
	return strings.Join(s, " ")
}

// shortVIP is the VIP's last part, enough to tell the run's VIPs apart.
func shortVIP(v netip.Addr) string {
	s := v.String()
	if i := strings.LastIndexAny(s, ".:"); i >= 0 && v.Is4() {
		return "." + s[i+1:]
	}
	return s
}

func okText(ok bool, bad string) string {
	if ok {
		return "ok"
	}
	return "**" + bad + "**"
}

// keptText is the limits' line on the keep faults: the VIPs their nodes
// held, the handovers found and how many of them another fault excused.
func keptText(d *Data, a *Analysis) string {
	faults := 0
	for _, r := range d.Records {
		if Keeps(r.Kind) {
			faults++
		}
	}
	head := fmt.Sprintf("- no handover (%s): ", kindsWhere(Keeps))
	if faults == 0 {
		return head + "no such fault"
	}
	excused, longest := 0, time.Duration(0)
	frozen := 0
	for _, h := range a.Handovers {
		switch {
		case h.Excused >= 0:
			excused++
		case h.Frozen > 0:
			frozen++
		default:
			longest = max(longest, h.Len)
		}
	}
	bad := len(a.Handovers) - excused - frozen
	text := fmt.Sprintf("%d faults, %d VIPs held when they began, %d handovers (%d excused by another fault, %d by the node's freeze)", faults, a.Kept, len(a.Handovers), excused, frozen)
	if bad > 0 {
		text += fmt.Sprintf(", the longest unexcused %s", fmtDur(longest))
	}
	return head + text + ": " + okText(bad == 0, fmt.Sprintf("%d false alarms", bad))
}

// advertText is twice the fleet's advert interval, or says it is unknown.
func advertText(advert time.Duration) string {
	if advert <= 0 {
		return "the advert interval unknown: none excused"
	}
	return fmtDur(2 * advert)
}

// handoverNotes describes the handovers of record ri's VIPs.
func handoverNotes(d *Data, a *Analysis, ri int) []string {
	var ns []string
	for _, h := range a.Handovers {
		if h.Record != ri {
			continue
		}
		n := fmt.Sprintf("%s to %v at %s for %s", shortVIP(h.VIP), h.Takers, fmtOffset(h.At.Sub(d.Start)), fmtDur(h.Len))
		switch {
		case h.Excused >= 0:
			n += fmt.Sprintf(" (excused by #%d)", d.Records[h.Excused].Index)
		case h.Frozen > 0:
			n += fmt.Sprintf(" (excused: the node had not answered at its own addresses for %s)", fmtDur(h.Frozen))
		default:
			n = "**handover: " + n + "**"
		}
		ns = append(ns, n)
	}
	return ns
}

// kindsWhere lists the kinds for which is holds, in the order of
// allKinds.
func kindsWhere(is func(Kind) bool) string {
	var ks []string
	for _, k := range allKinds() {
		if is(k) {
			ks = append(ks, string(k))
		}
	}
	return strings.Join(ks, ", ")
}

func limitText(k Kind, d *Data) string {
	var bounds []time.Duration
	for _, r := range d.Records {
		if r.Kind == k && r.Bound > 0 {
			bounds = append(bounds, r.Bound)
		}
	}
	return boundRange(bounds)
}

func boundRange(bs []time.Duration) string {
	if len(bs) == 0 {
		return "-"
	}
	lo, hi := slices.Min(bs), slices.Max(bs)
	if lo == hi {
		return fmtDur(lo)
	}
	return fmtDur(lo) + "–" + fmtDur(hi)
}
