package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/test/bench"
)

// Rows of make bench's short mixed run.
const (
	RowUnavailable = "mixed faults: time each VIP was unreachable"
	RowLongest     = "mixed faults: longest outage per VIP"
	RowTwice       = "mixed faults: time each VIP was on two nodes"
)

// BenchRows are the figures of a run as make bench's rows: per VIP, the
// share of the run in outages, the longest outage, and the time on two
// nodes (less the client's own stalls, as in the report); the notes give
// the seed, the faults, what broke a limit and how long the client
// stalled.
func (r *Result) BenchRows() []bench.Row {
	var down []float64
	var longest, twice []bench.Sample
	lo, hi := 100.0, 0.0
	for _, v := range r.Analysis.VIPs {
		down = append(down, 100*(1-v.Availability))
		lo, hi = min(lo, v.Availability*100), max(hi, v.Availability*100)
		var l time.Duration
		for _, o := range v.Outages {
			l = max(l, o.Len()-o.Stalled)
		}
		longest = append(longest, bench.Sample{Value: l})
		twice = append(twice, bench.Sample{Value: v.Twice})
	}
	kinds := map[Kind]int{}
	for _, f := range r.Schedule.Faults {
		kinds[f.Kind]++
	}
	var ks []string
	for _, k := range allKinds() {
		if kinds[k] > 0 {
			ks = append(ks, fmt.Sprintf("%d %s", kinds[k], k))
		}
	}
	verdict := "every limit and invariant held"
	if !r.Pass() {
		verdict = fmt.Sprintf("%d limits broken, %d problems, %d invariants failed: see %s", len(r.Analysis.Violations), len(r.Problems), failed(r.Checks), r.Report)
	}
	if n := len(r.Data.Stalls); n > 0 {
		verdict += fmt.Sprintf("; the client stalled %d times, %s in all, not counted as outages", n, fmtDur(total(r.Data.Stalls, r.Data.Start, r.Data.End)))
	}
	var silent, late time.Duration
	for _, v := range r.Analysis.VIPs {
		for _, o := range v.Outages {
			silent += o.Silent
			late += o.Unannounced
		}
	}
	if silent > 0 {
		verdict += fmt.Sprintf("; holders silent at their own addresses too for %s of the outages, not held to the limits", fmtDur(silent))
	}
	if late > 0 {
		verdict += fmt.Sprintf("; a kernel late to announce a VIP the client was sent to for %s of the outages, not held to the limits", fmtDur(late))
	}
	if n := len(r.Analysis.Hiccups); n > 0 {
		verdict += fmt.Sprintf("; the machine hiccuped %d times (no node's own address answered), %s in all, not held to the limits", n, fmtDur(total(r.Analysis.Hiccups, r.Data.Start, r.Data.End)))
	}
	unreachable := bench.ShareRow(RowUnavailable, down, fmt.Sprintf("seed %d, %s, %d faults (%s), a client probing each VIP over TCP every %s; availability %.3f–%.3f %%; %s",
		r.Schedule.Seed, r.Schedule.Duration, len(r.Schedule.Faults), strings.Join(ks, ", "), ProbeInterval, lo, hi, verdict))
	return []bench.Row{
		unreachable,
		bench.TimeRow(RowLongest, longest, "", ""),
		bench.TimeRow(RowTwice, twice, "", ""),
	}
}

func failed(cs []Check) int {
	n := 0
	for _, c := range cs {
		if !c.OK {
			n++
		}
	}
	return n
}
