package chaos

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// probes makes a probe every 10 ms from 0 to to (ms), failing inside the
// given [start, end) spans, answered by node; an answer takes 1 ms.
func probes(to int, node string, failing ...[2]int) []Probe {
	var ps []Probe
	for ms := 0; ms < to; ms += 10 {
		p := Probe{Sent: at(ms), Done: at(ms + 1), OK: true, Node: node}
		for _, f := range failing {
			if ms >= f[0] && ms < f[1] {
				p = Probe{Sent: at(ms), Done: at(ms + 250), Err: "timeout"}
			}
		}
		ps = append(ps, p)
	}
	return ps
}

func TestOutages(t *testing.T) {
	ps := probes(1000, "node1", [2]int{100, 150}, [2]int{500, 520})
	ps[51].Err = "refused" // one of the second run's two failures
	got := Outages(ps)
	want := []Outage{
		{Interval: Interval{at(100), at(150)}, Failed: 5, Reason: "timeout", Back: ps[15]},
		{Interval: Interval{at(500), at(520)}, Failed: 2, Reason: "refused", Back: ps[52]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Outages (-want +got):\n%s", diff)
	}
	// A slow path (answers after 100 ms) does not lengthen an outage; a
	// late answer (the VIP back only then) does not shorten it.
	slow := []Probe{
		{Sent: at(0), Done: at(100), OK: true},
		{Sent: at(10), Done: at(260), Err: "timeout"},
		{Sent: at(20), Done: at(120), OK: true},
		{Sent: at(30), Done: at(280), Err: "timeout"},
		{Sent: at(40), Done: at(400), OK: true},
	}
	got = Outages(slow)
	if len(got) != 2 || !got[0].End.Equal(at(20)) || !got[1].End.Equal(at(300)) {
		t.Errorf("outages on a slow path = %+v, want ending at 20 ms and at 300 ms", got)
	}
	// A probe sent later answered sooner (the first answer went through
	// the old holder, which forwarded it): the VIP was back by then, and a
	// failure sent before that is the same outage.
	detour := []Probe{
		{Sent: at(0), Done: at(1), OK: true},
		{Sent: at(10), Done: at(260), Err: "timeout"},
		{Sent: at(20), Done: at(220), OK: true, Node: "node1"},
		{Sent: at(30), Done: at(280), Err: "timeout"},
		{Sent: at(40), Done: at(41), OK: true, Node: "node1"},
		{Sent: at(50), Done: at(51), OK: true, Node: "node1"},
	}
	got = Outages(detour)
	if len(got) != 1 || !got[0].Start.Equal(at(10)) || !got[0].End.Equal(at(40)) || got[0].Failed != 2 || !got[0].Back.Sent.Equal(at(40)) {
		t.Errorf("outages with a detour = %+v, want one from 10 ms to 40 ms, 2 failed, back with the probe sent at 40 ms", got)
	}
	detour = slices.Delete(slices.Clone(detour), 3, 4) // no failure after the slow answer
	got = Outages(detour)
	if len(got) != 1 || !got[0].End.Equal(at(40)) || got[0].Failed != 1 {
		t.Errorf("outages with a detour and no failure after it = %+v, want one from 10 ms to 40 ms", got)
	}
	// A run that lasts to the end ends with the last probe.
	ps = probes(100, "node1", [2]int{50, 100})
	got = Outages(ps)
	if len(got) != 1 || !got[0].Start.Equal(at(50)) || !got[0].End.Equal(at(90+250)) {
		t.Errorf("an outage at the end = %+v, want from 50 ms to the last probe's end (340 ms)", got)
	}
	if got := Outages(nil); got != nil {
		t.Errorf("Outages(nil) = %v", got)
	}
}

func TestSpans(t *testing.T) {
	cs := []HolderChange{
		{At: at(0), Holders: []string{"node1"}},
		{At: at(100), Holders: []string{"node1", "node2"}},
		{At: at(150), Holders: []string{"node2"}},
		{At: at(300), Holders: []string{}},
		{At: at(400), Holders: []string{"node1", "node3"}},
	}
	end := at(500)
	for _, tc := range []struct {
		name string
		got  []Interval
		want []Interval
	}{
		{"doubles", Doubles(cs, end), []Interval{{at(100), at(150)}, {at(400), at(500)}}},
		{"nones", Nones(cs, end), []Interval{{at(300), at(400)}}},
		{"held by node1", HeldBy(cs, end, "node1"), []Interval{{at(0), at(150)}, {at(400), at(500)}}},
		{"held by node2", HeldBy(cs, end, "node2"), []Interval{{at(100), at(300)}}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := HoldersAt(cs, at(120)); !cmp.Equal(got, []string{"node1", "node2"}) {
		t.Errorf("HoldersAt(120 ms) = %v", got)
	}
	if got := HoldersAt(cs, at(-1)); got != nil {
		t.Errorf("HoldersAt before the first change = %v, want nil", got)
	}
}

func TestIntervalSets(t *testing.T) {
	a := []Interval{{at(0), at(100)}, {at(200), at(300)}}
	cut := []Interval{{at(50), at(250)}}
	if diff := cmp.Diff([]Interval{{at(0), at(50)}, {at(250), at(300)}}, subtract(a, cut)); diff != "" {
		t.Errorf("subtract (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Interval{{at(50), at(100)}, {at(200), at(250)}}, intersect(a, cut)); diff != "" {
		t.Errorf("intersect (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Interval{{at(0), at(300)}}, merge(append(a, cut...))); diff != "" {
		t.Errorf("merge (-want +got):\n%s", diff)
	}
	if got := total(a, at(50), at(250)); got != 100*time.Millisecond {
		t.Errorf("total clipped = %s, want 100ms", got)
	}
}

// addrCmp compares netip.Addr values, whose fields cmp cannot see.
var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

var (
	vipA = netip.MustParseAddr("192.0.2.100")
	vipB = netip.MustParseAddr("192.0.2.101")
)

// twoFaults is a run of 10 s over two VIPs: a node death on node1 at 1 s
// (back at 4.5 s), which costs A an outage of 3.2 s (over its bound) and
// leaves A on two nodes until 3.1 s; and a partition from 6 s to 7 s that
// overlaps a service stop on node2 from 6.5 s to 8 s, during which B is
// out for 200 ms; and an outage of A at 9.5 s that nothing explains.
func twoFaults() *Data {
	return &Data{
		Start: at(0), End: at(10000),
		Nodes: names3,
		VIPs:  []netip.Addr{vipA, vipB},
		Probes: [][]Probe{
			probes(10000, "node1", [2]int{1000, 4200}, [2]int{9500, 9600}),
			probes(10000, "node2", [2]int{6600, 6800}),
		},
		Holdings: Holdings{
			vipA: {{At: at(-500), Holders: []string{"node1"}}, {At: at(4000), Holders: []string{"node1", "node2"}}, {At: at(4100), Holders: []string{"node2"}}},
			vipB: {{At: at(-500), Holders: []string{"node2"}}, {At: at(6600), Holders: []string{}}, {At: at(6800), Holders: []string{"node3"}}},
		},
		Entries: Entries{
			vipA: {{At: at(-500), Node: "node1"}, {At: at(4000), Node: "node2"}},
		},
		Records: []Record{
			{Fault: Fault{Index: 1, Kind: NodeDeath, Nodes: []int{0}}, Began: at(1000), Ended: at(4500), Recovered: at(4550),
				Bound: 3100 * time.Millisecond, Downs: []NodeDown{{0, Interval{at(1000), at(4550)}}}},
			{Fault: Fault{Index: 2, Kind: Partition, Nodes: []int{1, 2}}, Began: at(6000), Ended: at(7000), Recovered: at(7000)},
			{Fault: Fault{Index: 3, Kind: ServiceStop, Nodes: []int{1}}, Began: at(6500), Ended: at(8000), Recovered: at(8000),
				Bound: 400 * time.Millisecond, Downs: []NodeDown{{1, Interval{at(6500), at(8000)}}}},
		},
		Allowance: time.Second,
		DupBound:  3 * time.Second,
	}
}

// TestMeasureFromRecovery: a node whose service came back is a backup
// only once its check passes (its record's Recovered); an outage that
// began before then is held to the limit from then. Here node2 holds A
// and stops gracefully 1 ms after node1's service is back, node3 being
// dead; node1 takes A by its master-down timer after its check passed.
func TestMeasureFromRecovery(t *testing.T) {
	d := &Data{
		Start: at(0), End: at(10000), Nodes: names3, VIPs: []netip.Addr{vipA},
		Probes:   [][]Probe{probes(10000, "node2", [2]int{3001, 6201})},
		Holdings: Holdings{vipA: {{At: at(-500), Holders: []string{"node2"}}, {At: at(3002), Holders: []string{}}, {At: at(6200), Holders: []string{"node1"}}}},
		Records: []Record{
			{Fault: Fault{Index: 1, Kind: NodeDeath, Nodes: []int{2}}, Began: at(500), Ended: at(9000), Recovered: at(9100),
				Bound: 3100 * time.Millisecond, Downs: []NodeDown{{2, Interval{at(500), at(9100)}}}},
			{Fault: Fault{Index: 2, Kind: ServiceStop, Nodes: []int{0}}, Began: at(1000), Ended: at(3000), Recovered: at(3200),
				Bound: 400 * time.Millisecond, Downs: []NodeDown{{0, Interval{at(1000), at(3200)}}}},
			{Fault: Fault{Index: 3, Kind: EntrypointTerm, Nodes: []int{1}}, Began: at(3001), Ended: at(3002), Recovered: at(6300),
				Bound: 100 * time.Millisecond, Downs: []NodeDown{{1, Interval{at(3001), at(6300)}}}},
		},
		Allowance: time.Second,
		DupBound:  3 * time.Second,
	}
	a := Analyse(d)
	if len(a.VIPs[0].Held) != 1 || a.VIPs[0].Held[0] != (Measure{3010 * time.Millisecond, 3100 * time.Millisecond}) {
		t.Errorf("A's held parts %+v, want 3.01 s (from node1's recovery) against 3.1 s", a.VIPs[0].Held)
	}
	if len(a.Violations) != 0 {
		t.Errorf("violations %+v, want none", a.Violations)
	}
}

func TestAnalyseCharges(t *testing.T) {
	d := twoFaults()
	a := Analyse(d)
	if diff := cmp.Diff([]bool{true, false, false}, a.Isolated); diff != "" {
		t.Errorf("isolated (-want +got):\n%s", diff)
	}
	// A's node-death outage goes to #1, alone; A's last outage to nobody;
	// B's outage starts in both #2's and #3's windows: #3 began last.
	wantA := []Charge{{Record: 0}, {Record: -1}}
	if diff := cmp.Diff(wantA, a.VIPs[0].Charges); diff != "" {
		t.Errorf("A's charges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Charge{{Record: 2, Overlapped: true}}, a.VIPs[1].Charges); diff != "" {
		t.Errorf("B's charges (-want +got):\n%s", diff)
	}
	want := []Violation{
		{Record: 0, VIP: vipA, What: "outage", Got: 3200 * time.Millisecond, Limit: 3100 * time.Millisecond, At: at(1000)},
		{Record: -1, VIP: vipA, What: "unexplained outage", Got: 100 * time.Millisecond, At: at(9500)},
		// A sat on two nodes from 4 s to 4.1 s: #1 was over by then, and
		// no fault was in progress, so all of it counts... and is short.
	}
	if diff := cmp.Diff(want, a.Violations, addrCmp); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	if got := a.VIPs[0].Twice; got != 100*time.Millisecond {
		t.Errorf("A on two nodes %s, want 100ms", got)
	}
	if got, want := a.VIPs[1].NoHolder, 200*time.Millisecond; got != want {
		t.Errorf("B without holder %s, want %s", got, want)
	}
	if got, want := a.VIPs[0].Availability, 1-float64(3300)/10000; got != want {
		t.Errorf("A's availability %v, want %v", got, want)
	}
	var death, stop KindResult
	for _, k := range a.Kinds {
		switch k.Kind {
		case NodeDeath:
			death = k
		case ServiceStop:
			stop = k
		}
	}
	if death.Faults != 1 || death.Isolated != 1 || len(death.Outages[0]) != 1 || len(death.Outages[1]) != 0 {
		t.Errorf("node-death's figures = %+v", death)
	}
	if stop.Faults != 1 || stop.Isolated != 0 || len(stop.Outages[1]) != 1 {
		t.Errorf("service-stop's figures = %+v", stop)
	}
}

func TestAnalyseDuplicates(t *testing.T) {
	d := twoFaults()
	// B on node2 and node3 from 6.2 s, during the partition, until 11 s:
	// 3 s after the service stop (the last fault in progress) recovered at
	// 8 s, beyond the bound.
	d.End = at(12000)
	d.Holdings[vipB] = []HolderChange{{At: at(-500), Holders: []string{"node2"}}, {At: at(6200), Holders: []string{"node2", "node3"}}, {At: at(11001), Holders: []string{"node3"}}}
	a := Analyse(d)
	var dup []Violation
	for _, v := range a.Violations {
		if v.What == "duplicate healed" {
			dup = append(dup, v)
		}
	}
	want := []Violation{{Record: 2, VIP: vipB, What: "duplicate healed", Got: 3001 * time.Millisecond, Limit: 3 * time.Second, At: at(6200)}}
	if diff := cmp.Diff(want, dup, addrCmp); diff != "" {
		t.Errorf("duplicate violations (-want +got):\n%s", diff)
	}
}

func TestNoHolderWhileHealthy(t *testing.T) {
	d := twoFaults()
	// Every node down from 6.6 s to 6.7 s: B's 200 ms without a holder
	// count only half.
	d.Records[1].Downs = []NodeDown{{0, Interval{at(6000), at(6700)}}, {2, Interval{at(6000), at(7000)}}}
	a := Analyse(d)
	if got, want := a.VIPs[1].NoHolderHealthy, 100*time.Millisecond; got != want {
		t.Errorf("B without holder while a node could hold it: %s, want %s", got, want)
	}
}

func TestMeasure(t *testing.T) {
	rec := func(began, bound int) Record {
		return Record{Began: at(began), Ended: at(began), Recovered: at(began), Bound: time.Duration(bound) * time.Millisecond}
	}
	for _, tc := range []struct {
		name       string
		recs       []Record
		from, to   int
		got, limit int
	}{
		{"alone", []Record{rec(1000, 3100)}, 1000, 4000, 3000, 3100},
		// The backup about to take over dies 2 s later: the count starts
		// again from its death.
		{"second death within the limit", []Record{rec(1000, 3100), rec(3000, 3100)}, 1000, 6000, 3000, 3100},
		// A client stranded for 10 s when another fault comes along: that
		// fault does not forgive what was already over the limit.
		{"a fault after the limit ran out", []Record{rec(1000, 3100), rec(9000, 3100)}, 1000, 10000, 9000, 3100},
		// A graceful handover in progress when a node dies: the dead
		// node's bound, the more lenient.
		{"the most lenient", []Record{rec(1000, 100), rec(1050, 3100)}, 1100, 1300, 200, 3100},
		// A frozen node resumes during the outage: VRRP sorts the VIPs
		// out anew from then.
		{"a node back", []Record{{Began: at(1000), Ended: at(3000), Recovered: at(3000), Bound: 3100 * time.Millisecond}}, 2500, 6000, 3000, 3100},
		// A killed service's process gone 800 ms after the kill: the
		// failed check's count starts then.
		{"a fault taking hold late", []Record{{Began: at(1000), Effective: at(1800), Ended: at(5000), Recovered: at(5000), Bound: 375 * time.Millisecond}}, 1000, 2100, 300, 375},
		// A node freezes while the segment delays every packet 27 ms ±
		// 11 ms: the backups hear its last advert up to 38 ms late.
		{"a delaying segment", []Record{
			{Fault: Fault{Kind: Segment, Delay: 27 * time.Millisecond, Jitter: 11 * time.Millisecond}, Began: at(0), Ended: at(5000), Recovered: at(5000), Bound: 707 * time.Millisecond},
			rec(1000, 705),
		}, 1000, 1712, 712, 745},
		// One that was over before the outage began changes nothing.
		{"a delaying segment over", []Record{
			{Fault: Fault{Kind: Segment, Delay: 27 * time.Millisecond, Jitter: 11 * time.Millisecond}, Began: at(0), Ended: at(500), Recovered: at(500), Bound: 707 * time.Millisecond},
			rec(1000, 705),
		}, 1000, 1712, 712, 707},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Data{Records: tc.recs, Allowance: time.Second}
			var wins []Interval
			for _, r := range d.Records {
				wins = append(wins, d.Window(r))
			}
			got, limit := d.measure(Interval{at(tc.from), at(tc.to)}, wins)
			if want := time.Duration(tc.got) * time.Millisecond; got != want {
				t.Errorf("held part %s, want %s", got, want)
			}
			if want := time.Duration(tc.limit) * time.Millisecond; limit != want {
				t.Errorf("limit %s, want %s", limit, want)
			}
		})
	}
}

// TestAnalyseStalls: probes that timed out while the client was stalled
// are left out, and the stalled time within an outage counts neither as
// down time nor against the limit.
func TestAnalyseStalls(t *testing.T) {
	d := twoFaults()
	// A stall covers A's unexplained outage (all timeouts), and 500 ms
	// of the node death's outage, which was 100 ms over its limit.
	d.Stalls = []Interval{{at(2000), at(2500)}, {at(9450), at(9700)}}
	a := Analyse(d)
	if len(a.Violations) != 0 {
		t.Errorf("violations %+v, want none: the client's stalls are not the VIPs'", a.Violations)
	}
	r := a.VIPs[0]
	if len(r.Outages) != 1 || r.Outages[0].Stalled != 500*time.Millisecond || !r.Outages[0].Start.Equal(at(1000)) {
		t.Fatalf("A's outages %+v, want the node death's alone, from 1 s, 500 ms of it stalled", r.Outages)
	}
	if r.Down != 2700*time.Millisecond || r.Stalled == 0 {
		t.Errorf("A down %s with %d probes left out, want 2.7 s and some left out", r.Down, r.Stalled)
	}
	// A refusal is the VIP's even during a stall.
	d.Probes[1][661].Err = "refused"
	d.Stalls = []Interval{{at(6550), at(6900)}}
	if os := Analyse(d).VIPs[1].Outages; len(os) != 1 || !os[0].Start.Equal(at(6610)) {
		t.Errorf("B's outages %+v, want one from the refused probe at 6.61 s", os)
	}
}

// starved is a run of 20 s over two VIPs: node1 holds A throughout, node2
// B, and a cpu-starve fault on node1 runs from 2 s to 8 s; its handover
// check spans 2 s to 10 s.
func starved() *Data {
	return &Data{
		Start: at(0), End: at(20000),
		Nodes: names3,
		VIPs:  []netip.Addr{vipA, vipB},
		Probes: [][]Probe{
			probes(20000, "node1"),
			probes(20000, "node2"),
		},
		Holdings: Holdings{
			vipA: {{At: at(-500), Holders: []string{"node1"}}},
			vipB: {{At: at(-500), Holders: []string{"node2"}}},
		},
		Records: []Record{
			{Fault: Fault{Index: 1, Kind: CPUStarve, Nodes: []int{0}}, Began: at(2000), Ended: at(8000), Recovered: at(8000),
				Held: []netip.Addr{vipA}, Bound: GracefulBound},
		},
		Allowance: time.Second,
		DupBound:  3 * time.Second,
	}
}

func TestAnalyseHandovers(t *testing.T) {
	handover := func(ms int) []HolderChange {
		return []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(ms), Holders: []string{"node1", "node2"}},
			{At: at(ms + 50), Holders: []string{"node2"}}, {At: at(ms + 3000), Holders: []string{"node1"}}}
	}
	other := func(k Kind, nodes []int, began, ended int) Record {
		return Record{Fault: Fault{Index: 2, Kind: k, Nodes: nodes}, Began: at(began), Ended: at(ended), Recovered: at(ended)}
	}
	for _, tc := range []struct {
		name    string
		changes []HolderChange
		other   []Record
		// found is how many handovers, false how many unexcused.
		found, bad int
		// got is the unexcused handover's length.
		got time.Duration
	}{
		{name: "kept", changes: nil},
		{name: "taken during the fault", changes: handover(5000), found: 1, bad: 1, got: 3000 * time.Millisecond},
		{name: "taken within KeepAfter of its end", changes: handover(9000), found: 1, bad: 1, got: 1000 * time.Millisecond},
		{name: "taken after KeepAfter", changes: handover(10500)},
		{name: "taken before it", changes: handover(-2900)},
		{name: "a lossy segment explains it", changes: handover(5000), other: []Record{other(Segment, nil, 4000, 6000)}, found: 1},
		// node2 coming back takes its VIP back.
		{name: "the taker's own fault explains it", changes: handover(5000), other: []Record{other(NodeDeath, []int{1}, 1000, 4800)}, found: 1},
		// node1 itself dies as its starve ends: its VIP goes to nobody.
		{name: "the starved node's own death explains it", changes: []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(8100), Holders: []string{}}},
			other: []Record{other(NodeDeath, []int{0}, 8000, 12000)}, found: 1},
		{name: "a fault elsewhere does not", changes: handover(5000), other: []Record{other(NodeFreeze, []int{2}, 4000, 6000)}, found: 1, bad: 1, got: 3000 * time.Millisecond},
		// A VIP that goes from its holder to none, then to node2 coming
		// back, is node2's doing.
		{name: "the taker after no holder", changes: []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(5000), Holders: []string{}},
			{At: at(5100), Holders: []string{"node2"}}}, other: []Record{other(ServiceStop, []int{1}, 1000, 4800)}, found: 1},
		{name: "no holder and back", changes: []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(5000), Holders: []string{}},
			{At: at(5100), Holders: []string{"node1"}}}, other: []Record{other(ServiceStop, []int{1}, 1000, 4800)}, found: 1, bad: 1, got: 100 * time.Millisecond},
		{name: "a fault whose window is over does not", changes: handover(5000), other: []Record{other(Segment, nil, 1000, 3000)}, found: 1, bad: 1, got: 3000 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := starved()
			if tc.changes != nil {
				d.Holdings[vipA] = tc.changes
			}
			d.Records = append(d.Records, tc.other...)
			a := Analyse(d)
			if a.Kept != 1 {
				t.Errorf("%d VIPs checked, want 1 (A)", a.Kept)
			}
			if len(a.Handovers) != tc.found {
				t.Errorf("handovers %+v, want %d", a.Handovers, tc.found)
			}
			var bad []Violation
			for _, v := range a.Violations {
				if strings.HasPrefix(v.What, "handover") {
					bad = append(bad, v)
				}
			}
			if len(bad) != tc.bad {
				t.Fatalf("handover violations %+v, want %d", bad, tc.bad)
			}
			if tc.bad == 1 {
				v := bad[0]
				if want := map[bool]string{true: "handover to []", false: "handover to [node2]"}[tc.name == "no holder and back"]; v.Record != 0 || v.VIP != vipA || v.Got != tc.got || v.What != want {
					t.Errorf("violation %+v, want #1's on A for %s, to node2", v, tc.got)
				}
				if s := v.String(d); !strings.Contains(s, "cpu-starve on node1") {
					t.Errorf("violation text %q", s)
				}
			}
		})
	}
}

// TestAnalyseHandoverBeganTwice: a VIP on two nodes when the fault began
// is a handover from the start, unless the fault that put it there
// explains it.
func TestAnalyseHandoverBeganTwice(t *testing.T) {
	d := starved()
	d.Holdings[vipA] = []HolderChange{{At: at(1900), Holders: []string{"node1", "node3"}}, {At: at(2500), Holders: []string{"node1"}}}
	a := Analyse(d)
	if len(a.Handovers) != 1 || !a.Handovers[0].At.Equal(at(2000)) || a.Handovers[0].Len != 500*time.Millisecond || a.Handovers[0].Excused != -1 {
		t.Errorf("handovers %+v, want one of 500 ms from 2 s, unexcused", a.Handovers)
	}
	d.Records = append(d.Records, Record{Fault: Fault{Index: 2, Kind: NodeFreeze, Nodes: []int{2}}, Began: at(0), Ended: at(1800), Recovered: at(1800)})
	if a := Analyse(d); len(a.Handovers) != 1 || a.Handovers[0].Excused != 1 {
		t.Errorf("handovers %+v, want one, excused by the freeze of node3", a.Handovers)
	}
}

func TestHiccups(t *testing.T) {
	d := twoFaults()
	d.Lead = 0
	d.Records = append(d.Records, Record{Fault: Fault{Index: 4, Kind: Segment}, Began: at(5000), Ended: at(5500), Recovered: at(5500)})
	d.Controls = [][]Probe{
		// node1: dead from 1 s to 4.55 s; with the others at 9.5 s and
		// in the segment fault.
		probes(10000, "node1", [2]int{1000, 4550}, [2]int{5100, 5200}, [2]int{9500, 9600}),
		// node2: with node3 at 2 s (node1 dead: two witnesses are
		// enough), alone at 3 s, its service stopped from 6.5 s.
		probes(10000, "node2", [2]int{2000, 2300}, [2]int{3000, 3100}, [2]int{5100, 5200}, [2]int{6500, 8000}, [2]int{9500, 9600}),
		probes(10000, "node3", [2]int{2000, 2300}, [2]int{5100, 5200}, [2]int{9500, 9600}),
	}
	want := []Interval{{at(2000), at(2300)}, {at(9500), at(9600)}}
	if diff := cmp.Diff(want, d.Hiccups()); diff != "" {
		t.Errorf("hiccups (-want +got):\n%s", diff)
	}
	// The node death's outage was 100 ms over its limit and A's last
	// one unexplained; the hiccups take 300 ms out of the first and all
	// of the second.
	a := Analyse(d)
	if len(a.Violations) != 0 {
		t.Errorf("violations %+v, want none: the machine's hiccups are not the VIPs'", a.Violations)
	}
	r := a.VIPs[0]
	if len(r.Outages) != 2 || r.Outages[0].Hiccup != 300*time.Millisecond || r.Outages[1].Counted() != 0 {
		t.Fatalf("A's outages %+v, want 300 ms of the first and all of the second in hiccups", r.Outages)
	}
	// A's second outage: node2 held it and did not answer at its own
	// address either; in the first node1 held it, dead.
	if diff := cmp.Diff([]string{"node2"}, r.Outages[1].Mute); diff != "" || r.Outages[0].Mute != nil {
		t.Errorf("silent holders %v and %v, want none and node2 (-want +got of the second):\n%s", r.Outages[0].Mute, r.Outages[1].Mute, diff)
	}
	if r.Down != 3300*time.Millisecond {
		t.Errorf("A down %s, want 3.3 s (availability is what the client saw, hiccups included)", r.Down)
	}
	// One node failing alone, or all of them with one witness left, is
	// no hiccup.
	d.Controls[2] = probes(10000, "node3")
	if got := d.Hiccups(); len(got) != 0 {
		t.Errorf("hiccups with node3 answering throughout: %v, want none", got)
	}
	d.Controls[2] = probes(10000, "node3", [2]int{2000, 2300})
	d.Records = append(d.Records, Record{Fault: Fault{Index: 5, Kind: ServiceStop, Nodes: []int{1}}, Began: at(1500), Ended: at(2500), Recovered: at(2500),
		Downs: []NodeDown{{1, Interval{at(1500), at(2500)}}}})
	if got := d.Hiccups(); len(got) != 0 {
		t.Errorf("hiccups with node1 and node2 down and node3 the only witness: %v, want none", got)
	}
}

func TestSilentHolder(t *testing.T) {
	d := twoFaults()
	d.Lead = 0
	// B is out from 2 s to 2.4 s on node2, which does not answer at its
	// own address from 2.1 s to 2.3 s either; nobody else is silent.
	d.Probes[1] = probes(10000, "node2", [2]int{2000, 2400}, [2]int{6600, 6800})
	d.Entries[vipB] = []EntryChange{{At: at(-500), Node: "node2"}}
	d.Controls = [][]Probe{
		probes(10000, "node1", [2]int{1000, 4550}),
		probes(10000, "node2", [2]int{2100, 2300}, [2]int{6500, 8000}),
		probes(10000, "node3"),
	}
	os := Analyse(d).VIPs[1].Outages
	if len(os) != 2 || os[0].Silent != 200*time.Millisecond || os[0].Counted() != 200*time.Millisecond {
		t.Fatalf("B's outages %+v, want the first 400 ms long with 200 ms of node2's silence", os)
	}
	if diff := cmp.Diff([]string{"node2"}, os[0].Mute); diff != "" {
		t.Errorf("silent holders of the first (-want +got):\n%s", diff)
	}
	// The second: B had no holder; node2's service was stopped (a fault
	// took it down), which is no silence to excuse.
	if os[1].Silent != 0 {
		t.Errorf("B's second outage: %s silent, want none", os[1].Silent)
	}
	// Within a segment fault's window the losses hit both probes: no
	// silence.
	d.Records = append(d.Records, Record{Fault: Fault{Index: 4, Kind: Segment}, Began: at(1900), Ended: at(2000), Recovered: at(2000)})
	if os := Analyse(d).VIPs[1].Outages; os[0].Silent != 0 {
		t.Errorf("in a segment fault's window: %s silent, want none", os[0].Silent)
	}
	// Unless the node's own address goes unanswered for longer than the
	// segment's losses and restarts can make it: node2 silent from 1.9 s
	// to 2.45 s.
	ctl := d.Controls[1]
	d.Controls[1] = probes(10000, "node2", [2]int{1900, 2450}, [2]int{6500, 8000})
	if os := Analyse(d).VIPs[1].Outages; os[0].Silent != 400*time.Millisecond {
		t.Errorf("silent for 550 ms in a segment fault's window: %s of the outage silent, want 400ms", os[0].Silent)
	}
	d.Controls[1] = ctl
	d.Records = d.Records[:len(d.Records)-1]
	// A frozen node3 still listing B, which the client does not send to,
	// leaves node2's silence node2's.
	d.Records = append(d.Records, Record{Fault: Fault{Index: 4, Kind: NodeFreeze, Nodes: []int{2}}, Began: at(1500), Ended: at(3000), Recovered: at(3000),
		Bound: 700 * time.Millisecond, Downs: []NodeDown{{2, Interval{at(1500), at(3000)}}}})
	holdings := d.Holdings[vipB]
	d.Holdings[vipB] = append([]HolderChange{holdings[0], {At: at(1500), Holders: []string{"node2", "node3"}}, {At: at(3000), Holders: []string{"node2"}}}, holdings[1:]...)
	if os := Analyse(d).VIPs[1].Outages; os[0].Silent != 200*time.Millisecond {
		t.Errorf("beside a frozen holder: %s silent, want 200ms", os[0].Silent)
	}
	d.Holdings[vipB] = holdings
	d.Records = d.Records[:len(d.Records)-1]
	// The client sending elsewhere is the failover's doing, silent
	// holder or not.
	d.Entries[vipB] = []EntryChange{{At: at(-500), Node: "node3"}}
	if os := Analyse(d).VIPs[1].Outages; os[0].Silent != 0 {
		t.Errorf("with the client sending to node3: %s silent, want none", os[0].Silent)
	}
}

// TestSilentHolderAnswersLate: a holder that stops for a quarter of a
// second and then answers the whole backlog at once, within the deadline,
// fails none of the probes of its own address; the client heard nothing
// from it all the same, and the VIP's probe that timed out meanwhile is
// the node's silence. A pod deleted on the node does not silence it: the
// node's own address answers through the fault.
func TestSilentHolderAnswersLate(t *testing.T) {
	d := twoFaults()
	d.Lead = 0
	d.Entries[vipB] = []EntryChange{{At: at(-500), Node: "node2"}}
	// node2 stops from 2.001 s to 2.25 s: the probes sent then are
	// answered at 2.25 s, the VIP's at 2 s times out.
	stop := func(ps []Probe) {
		for i := range ps {
			if ms := ps[i].Sent.Sub(t0).Milliseconds(); ms >= 2000 && ms < 2250 && ps[i].OK {
				ps[i].Done = at(2250)
			}
		}
	}
	d.Probes[1] = probes(10000, "node2", [2]int{2000, 2010}, [2]int{6600, 6800})
	stop(d.Probes[1])
	ctl := probes(10000, "node2", [2]int{6500, 8000})
	stop(ctl)
	d.Controls = [][]Probe{probes(10000, "node1", [2]int{1000, 4550}), ctl, probes(10000, "node3")}
	silent := func(what string) {
		t.Helper()
		os := Analyse(d).VIPs[1].Outages
		if len(os) != 2 || os[0].Len() != 249*time.Millisecond || os[0].Silent != 249*time.Millisecond || os[0].Counted() != 0 {
			t.Fatalf("%s: B's outages %+v, want the first 249 ms long, all of it node2's silence", what, os)
		}
		if diff := cmp.Diff([]string{"node2"}, os[0].Mute); diff != "" {
			t.Errorf("%s: silent holders (-want +got):\n%s", what, diff)
		}
	}
	silent("node2 stopped")
	d.Records = append(d.Records, Record{Fault: Fault{Index: 4, Kind: PodDelete, Nodes: []int{1}}, Began: at(1500), Ended: at(1600), Recovered: at(3000),
		Downs: []NodeDown{{1, Interval{at(1500), at(3000)}}}})
	silent("with node2's pod deleted at 1.5 s and back at 3 s")
	d.Records = d.Records[:len(d.Records)-1]
	// A node answering at its own address in time: the VIP's timeout is
	// the failover's.
	d.Controls[1] = probes(10000, "node2", [2]int{6500, 8000})
	if os := Analyse(d).VIPs[1].Outages; os[0].Silent != 0 || os[0].Counted() != 249*time.Millisecond {
		t.Errorf("with node2 answering at once: %s silent, %s counted; want none silent, all 249ms counted", os[0].Silent, os[0].Counted())
	}
}

// TestAnswerGaps: a node's probes waiting with no answer for more than
// silenceAfter are a gap, from the first probe left waiting to the next
// answer less the answer time before it; the client sending nothing, or
// answers coming on time, are none.
func TestAnswerGaps(t *testing.T) {
	// stopped returns the probes of a node answering in 1 ms that leaves
	// the ones sent from 1 s on unanswered until until (ms).
	stopped := func(until int) []Probe {
		ps := probes(2000, "node2")
		for i := range ps {
			if ms := ps[i].Sent.Sub(t0).Milliseconds(); ms >= 1000 && ms < int64(until) {
				ps[i].Done = at(until)
			}
		}
		return ps
	}
	step := probes(2000, "node2")
	for i := 100; i < len(step); i++ {
		step[i].Done = step[i].Sent.Add(100 * time.Millisecond)
	}
	idle := slices.Concat(probes(1000, "node2"), []Probe{{Sent: at(1100), Done: at(1101), OK: true, Node: "node2"}})
	for _, tc := range []struct {
		name string
		ps   []Probe
		want []Interval
	}{
		{"no probes", nil, nil},
		{"one answer", probes(10, "node2"), nil},
		{"answering at once", probes(2000, "node2"), nil},
		{"stopped 50 ms: not yet", stopped(1051), nil},
		{"stopped 51 ms", stopped(1052), []Interval{{at(1000), at(1051)}}},
		{"stopped 250 ms", stopped(1250), []Interval{{at(1000), at(1249)}}},
		{"the client sending nothing for 110 ms", idle, nil},
		{"answers from 1 ms to 100 ms: the step once", step, []Interval{{at(1000), at(1099)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, answerGaps(tc.ps)); diff != "" {
				t.Errorf("answerGaps (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSilentHolderByFamily: an IPv6 VIP's holder is judged by the
// client's probes of its own IPv6 address, an IPv4 VIP's by its IPv4
// address; a recording without IPv6 controls falls back to IPv4's.
func TestSilentHolderByFamily(t *testing.T) {
	vip6 := netip.MustParseAddr("2001:db8::100")
	d := twoFaults()
	d.Lead = 0
	d.VIPs[1] = vip6
	d.Holdings[vip6] = d.Holdings[vipB]
	delete(d.Holdings, vipB)
	// The IPv6 VIP is out from 2 s to 2.4 s on node2, which is silent at
	// one of its addresses from 2.1 s to 2.3 s.
	d.Probes[1] = probes(10000, "node2", [2]int{2000, 2400}, [2]int{6600, 6800})
	d.Entries[vip6] = []EntryChange{{At: at(-500), Node: "node2"}}
	silent := probes(10000, "node2", [2]int{2100, 2300}, [2]int{6500, 8000})
	answers := probes(10000, "node2", [2]int{6500, 8000})
	others := func() []Probe { return probes(10000, "node3") }
	node1 := func() []Probe { return probes(10000, "node1", [2]int{1000, 4550}) }
	for _, tc := range []struct {
		name      string
		v4, v6    []Probe
		wantQuiet time.Duration
	}{
		{"silent at its IPv6 address", answers, silent, 200 * time.Millisecond},
		{"silent at its IPv4 address only", silent, answers, 0},
		{"no IPv6 controls recorded", silent, nil, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.Controls = [][]Probe{node1(), tc.v4, others()}
			d.Controls6 = nil
			if tc.v6 != nil {
				d.Controls6 = [][]Probe{node1(), tc.v6, others()}
			}
			os := Analyse(d).VIPs[1].Outages
			if len(os) != 2 || os[0].Silent != tc.wantQuiet {
				t.Errorf("the IPv6 VIP's outages %+v, want the first with %s of node2's silence", os, tc.wantQuiet)
			}
		})
	}
}

// TestClientChecksControls: the run fails when a node's own address, of
// either family, did not answer the client at the end: controls that
// never answer would make every holder look silent.
func TestClientChecksControls(t *testing.T) {
	d := &Data{
		Start: at(0), End: at(10000), Nodes: names3, VIPs: []netip.Addr{vipA},
		Probes:    [][]Probe{probes(10000, "node1")},
		Holdings:  Holdings{vipA: {{At: at(0), Holders: []string{"node1"}}}},
		Controls:  [][]Probe{probes(10000, "node1"), probes(10000, "node2"), probes(10000, "node3")},
		Controls6: [][]Probe{probes(10000, "node1"), probes(10000, "node2", [2]int{9000, 10000}), probes(10000, "node3")},
	}
	var failed []string
	checks := clientChecks(d, 2*time.Second)
	for _, c := range checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	if len(checks) != 7 || len(failed) != 1 || !strings.Contains(failed[0], "node2 at its own IPv6 address") {
		t.Errorf("%d checks, failed %q; want 7, node2's IPv6 address failing", len(checks), failed)
	}
}

func TestSlowAnswer(t *testing.T) {
	d := twoFaults()
	d.Lead = 0
	// B is out from 2 s; the probe sent at 2.4 s is answered by node2
	// 200 ms later, so the outage lasts to 2.599 s. node2's own address
	// probed in that round answers after 150 ms: the outage's end past
	// 2.45 s (the answer less node2's own answer time) is its slowness.
	d.Probes[1] = probes(10000, "node2", [2]int{2000, 2400}, [2]int{6600, 6800})
	d.Controls = [][]Probe{probes(10000, "node1"), probes(10000, "node2", [2]int{6500, 8000}), probes(10000, "node3")}
	ctl := d.Controls[1]
	// For half a second node2 answers everything slowly.
	for i := 240; i < 290; i++ {
		d.Probes[1][i].Done = d.Probes[1][i].Sent.Add(200 * time.Millisecond)
		ctl[i].Done = ctl[i].Sent.Add(150 * time.Millisecond)
	}
	os := Analyse(d).VIPs[1].Outages
	if len(os) != 2 || os[0].Len() != 599*time.Millisecond || os[0].Slow != 149*time.Millisecond || os[0].Counted() != 450*time.Millisecond {
		t.Fatalf("B's outages %+v, want the first 599 ms long with its last 150 ms node2's slowness", os)
	}
	// A control probe of the round that got no answer waited its whole
	// deadline: the node was slower than the VIP's answer.
	ctl[240] = Probe{Sent: at(2400), Done: at(2650), Err: "timeout"}
	if os := Analyse(d).VIPs[1].Outages; os[0].Slow != 199*time.Millisecond {
		t.Errorf("with the round's control unanswered: %s slow, want 199 ms (from the probe's sending)", os[0].Slow)
	}
	// The node answering at once at its own address: the VIP's slow
	// answer is the failover's.
	ctl[240] = Probe{Sent: at(2400), Done: at(2401), OK: true, Node: "node2"}
	if os := Analyse(d).VIPs[1].Outages; os[0].Slow != 0 {
		t.Errorf("with node2 answering at once: %s slow, want none", os[0].Slow)
	}
}

// TestAnswerAtTheDeadline: node2, starved, answers everything in about
// the deadline for 2.5 s; one of the VIP's probes falls 5 ms past it while its own
// address, probed in the same round, answers 5 ms within. That outage is
// the node's slowness; with its own address answering sooner, or a fault
// silencing it, it is not.
func TestAnswerAtTheDeadline(t *testing.T) {
	d := twoFaults()
	d.Lead = 0
	d.Entries[vipB] = []EntryChange{{At: at(-500), Node: "node2"}}
	slow := func(ps []Probe, took time.Duration) {
		for i := range 250 {
			ps[i].Done = ps[i].Sent.Add(took)
		}
	}
	d.Probes[1] = probes(10000, "node2", [2]int{2200, 2210}, [2]int{6600, 6800})
	slow(d.Probes[1], 245*time.Millisecond)
	d.Probes[1][220] = Probe{Sent: at(2200), Done: at(2455), Err: "timeout"}
	ctl := probes(10000, "node2", [2]int{6500, 8000})
	slow(ctl, 245*time.Millisecond)
	d.Controls = [][]Probe{probes(10000, "node1", [2]int{1000, 4550}), ctl, probes(10000, "node3")}
	os := Analyse(d).VIPs[1].Outages
	if len(os) != 2 || os[0].Len() == 0 || os[0].Counted() != 0 {
		t.Fatalf("B's outages %+v, want the first all node2's slowness", os)
	}
	slow(ctl, 100*time.Millisecond)
	if os := Analyse(d).VIPs[1].Outages; os[0].Counted() == 0 {
		t.Errorf("with node2's own address answering in 100 ms: the outage %+v counted none of it", os[0])
	}
	// The bound is the deadline less an interval: 240 ms.
	slow(ctl, 239*time.Millisecond)
	if os := Analyse(d).VIPs[1].Outages; os[0].Counted() == 0 {
		t.Errorf("with node2's own address answering in 239 ms: the outage %+v counted none of it", os[0])
	}
	slow(ctl, 240*time.Millisecond)
	if os := Analyse(d).VIPs[1].Outages; os[0].Counted() != 0 {
		t.Errorf("with node2's own address answering in 240 ms: the outage %+v counted %s", os[0], os[0].Counted())
	}
	slow(ctl, 245*time.Millisecond)
	d.Records = append(d.Records, Record{Fault: Fault{Index: 4, Kind: NodeFreeze, Nodes: []int{1}}, Began: at(2100), Ended: at(2300), Recovered: at(2300),
		Bound: 700 * time.Millisecond, Downs: []NodeDown{{1, Interval{at(2100), at(2300)}}}})
	if os := Analyse(d).VIPs[1].Outages; os[0].Counted() == 0 {
		t.Errorf("with node2 frozen: the outage %+v counted none of it", os[0])
	}
	d.Records = d.Records[:len(d.Records)-1]
	// The VIP gone from node2 for 5 ms while the probe was in flight.
	holdings := d.Holdings[vipB]
	d.Holdings[vipB] = append([]HolderChange{holdings[0], {At: at(2300), Holders: []string{}}, {At: at(2305), Holders: []string{"node2"}}}, holdings[1:]...)
	if os := Analyse(d).VIPs[1].Outages; os[0].Counted() == 0 {
		t.Errorf("with B gone from node2 for 5 ms in the probe's flight: the outage %+v counted none of it", os[0])
	}
	d.Holdings[vipB] = holdings
	// Timeouts for longer than a deadline, while node2's own address
	// answered within it, are the VIP's.
	for i := 220; i < 250; i++ {
		d.Probes[1][i] = Probe{Sent: d.Probes[1][i].Sent, Done: d.Probes[1][i].Sent.Add(ProbeDeadline), Err: "timeout"}
	}
	os = Analyse(d).VIPs[1].Outages
	if os[0].Len() <= ProbeDeadline || os[0].Counted() != os[0].Len() {
		t.Errorf("with 300 ms of B's probes timing out: the outage %+v (%s long) counted %s, want all of it", os[0], os[0].Len(), os[0].Counted())
	}
}

func TestKernelLate(t *testing.T) {
	d := twoFaults()
	// node2's keepalived took A at 3.4 s and announced it; the client
	// followed at once, but node2's kernel announced A (and routed it)
	// only at 4 s: A answered again at 4.2 s, past #1's bound.
	d.Entries[vipA] = []EntryChange{{At: at(-500), Node: "node1"}, {At: at(3400), Node: "node2"}}
	// (Its outage at 9.5 s is unexplained whatever the kernel did.)
	ofFirst := func(a Analysis) (n int) {
		for _, v := range a.Violations {
			if v.Record == 0 {
				n++
			}
		}
		return n
	}
	if n := ofFirst(Analyse(d)); n != 1 {
		t.Fatalf("without the address list: %d violations of #1, want its outage", n)
	}
	d.Unannounced = Unannounced{vipA: {{Node: "node2", At: at(3400), Dumped: at(3401)}}}
	a := Analyse(d)
	if n := ofFirst(a); n != 0 {
		t.Errorf("with node2 listing A from 3.4 s: violations %+v, want none of #1", a.Violations)
	}
	os := a.VIPs[0].Outages
	if os[0].Unannounced != 600*time.Millisecond || os[0].Counted() != 2600*time.Millisecond {
		t.Errorf("A's first outage %+v, want 600 ms of it the kernel late, 2.6 s counted", os[0])
	}
	if got := a.VIPs[0].Down; got != 3200*time.Millisecond+100*time.Millisecond {
		t.Errorf("A down %s, want every failed probe's time: availability keeps it", got)
	}
	// The client's entry moving on ends the span, as does the run's end.
	d.Entries[vipA] = append(d.Entries[vipA], EntryChange{At: at(3700), Node: "node3"})
	if got := d.unannouncedSpans(vipA); len(got) != 1 || got[0] != (Interval{at(3400), at(3700)}) {
		t.Errorf("with the entry naming node3 at 3.7 s: spans %v, want 3.4-3.7 s", got)
	}
	d.Entries[vipA] = d.Entries[vipA][:2]
	d.Holdings[vipA] = d.Holdings[vipA][:1]
	if got := d.unannouncedSpans(vipA); len(got) != 1 || got[0] != (Interval{at(3400), d.End}) {
		t.Errorf("node2 never announcing A: spans %v, want 3.4 s to the end", got)
	}
}

// TestHoldingsInOrder: a holder change applied after another but timed
// before it (the observer's lock taken late) is the later one: node1,
// starved, lost A to node3 coming back, which is excused, not a handover
// to nobody for the rest of the fault.
func TestHoldingsInOrder(t *testing.T) {
	d := &Data{
		Start: at(0), End: at(10000),
		Nodes:  names3,
		VIPs:   []netip.Addr{vipA},
		Probes: [][]Probe{probes(10000, "node1")},
		Holdings: Holdings{vipA: {
			{At: at(-500), Holders: []string{"node1"}},
			{At: at(5000).Add(100 * time.Microsecond), Holders: []string{}},
			{At: at(5000), Holders: []string{"node3"}},
		}},
		Records: []Record{
			{Fault: Fault{Index: 1, Kind: CPUStarve, Nodes: []int{0}}, Began: at(1000), Ended: at(8000), Recovered: at(8000), Held: []netip.Addr{vipA}},
			{Fault: Fault{Index: 2, Kind: EntrypointTerm, Nodes: []int{2}}, Began: at(2000), Ended: at(4500), Recovered: at(4800)},
		},
		Allowance: time.Second,
		DupBound:  3 * time.Second,
	}
	a := Analyse(d)
	if len(a.Handovers) != 1 || a.Handovers[0].Excused != 1 || !slices.Equal(a.Handovers[0].Takers, []string{"node3"}) {
		t.Fatalf("handovers %+v, want one to node3 excused by #2", a.Handovers)
	}
	for _, v := range a.Violations {
		t.Errorf("violation %+v", v)
	}
}

// TestCheckPasses: a node is back once its metrics say its check passes.
// TestCPUCheck: ipfailover's CPU since its start, from its process
// collector's series, passes up to a fifth of a core.
func TestCPUCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	page := func(cpu float64) string {
		return fmt.Sprintf("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %g\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d\n", cpu, now.Unix()-100)
	}
	for _, tc := range []struct {
		name, page string
		ok         bool
		detail     string
	}{
		{"idle", page(1.5), true, "1.5 % (1.5s of CPU in 1m40s)"},
		{"a fifth of a core", page(20), true, "20.0 % (20s of CPU in 1m40s)"},
		{"spinning", page(99), false, "99.0 % (1m39s of CPU in 1m40s)"},
		{"no process series", "# TYPE ipfailover_check_up gauge\nipfailover_check_up 1\n", false, "no process_cpu_seconds_total or process_start_time_seconds in the metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(tc.page))
			if err != nil {
				t.Fatal(err)
			}
			c := cpuCheck("node1", fams, now)
			if c.OK != tc.ok || c.Detail != tc.detail {
				t.Errorf("cpuCheck: ok %v, %q; want %v, %q", c.OK, c.Detail, tc.ok, tc.detail)
			}
		})
	}
}

func TestCheckPasses(t *testing.T) {
	page := "# HELP ipfailover_check_up 1 when the built-in check passes\n# TYPE ipfailover_check_up gauge\nipfailover_check_up %s\nipfailover_check_duration_seconds_count 3\n"
	if err := checkPasses(fmt.Sprintf(page, "1")); err != nil {
		t.Errorf("check up: %v", err)
	}
	if err := checkPasses(fmt.Sprintf(page, "0")); err == nil {
		t.Error("check down: no error")
	}
	if err := checkPasses("ipfailover_check_duration_seconds_count 3\n"); err == nil {
		t.Error("no check series: no error")
	}
}

// TestAnalyseHandoverFrozenNode: a starved node that had stopped answering
// at its own addresses (both families, the client running) at least two
// advert intervals when a backup took its VIP, which it still held, lost
// it by VRRP's own rule: the handover is listed, excused by the freeze (a
// backlog of probes answered at once after it too). A shorter silence, one
// over by then, one family answering, the client's stall within it, a VIP the node removed itself, another node's silence
// or an unknown advert interval excuse nothing; a late answer inside the
// silence starts it again.
func TestAnalyseHandoverFrozenNode(t *testing.T) {
	const ms = time.Millisecond
	// node2 takes A at 5 s while node1 keeps it (frozen, its kernel
	// holds the address), and yields 112 ms later.
	double := []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(5000), Holders: []string{"node1", "node2"}},
		{At: at(5112), Holders: []string{"node1"}}}
	// node1 removed A itself, then node2 took it: node1 was running.
	moved := []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(5000), Holders: []string{}},
		{At: at(5050), Holders: []string{"node2"}}, {At: at(5112), Holders: []string{"node1"}}}
	for _, tc := range []struct {
		name    string
		advert  time.Duration
		changes []HolderChange
		// silent is the node (index) that did not answer its own
		// addresses from from to to, in IPv4 unless only6 and in IPv6
		// unless only4.
		silent       int
		from, to     int
		only4, only6 bool
		stall        *Interval
		lateAnswer   int
		// backlog: the silent probes are answered at to, none failed.
		backlog bool
		// recordAdvert is the fault's Record.Advert.
		recordAdvert time.Duration
		frozen       time.Duration
	}{
		{name: "silent 500 ms at 0.2 s adverts", advert: 200 * ms, from: 4500, to: 5100, frozen: 500 * ms},
		{name: "silent exactly two adverts", advert: 200 * ms, from: 4600, to: 5100, frozen: 400 * ms},
		{name: "silent 390 ms at 0.2 s adverts", advert: 200 * ms, from: 4610, to: 5100},
		{name: "silent 500 ms at 1 s adverts", advert: time.Second, from: 4500, to: 5100},
		{name: "silence over before the VIP was taken", advert: 200 * ms, from: 4000, to: 4990},
		{name: "another node silent", advert: 200 * ms, silent: 1, from: 4500, to: 5100},
		{name: "advert interval unknown", from: 4500, to: 5100},
		// The nodes' configurations said 1 s when the fault began.
		{name: "silent 500 ms, the fault's nodes at 1 s", advert: 200 * ms, recordAdvert: time.Second, from: 4500, to: 5100},
		{name: "silent 500 ms, the fault's nodes at 0.2 s", recordAdvert: 200 * ms, from: 4500, to: 5100, frozen: 500 * ms},
		{name: "IPv6 answering", advert: 200 * ms, from: 4500, to: 5100, only4: true},
		{name: "IPv4 answering", advert: 200 * ms, from: 4500, to: 5100, only6: true},
		// The node answered the probes of 4.5-5.1 s all at once at 5.1 s
		// (an answer gap), and the client stalled 4.7-4.8 s: the silence
		// it can vouch for is the last 200 ms.
		{name: "the client stalled within the silence", advert: 200 * ms, from: 4500, to: 5100, backlog: true, stall: &Interval{at(4700), at(4800)}},
		{name: "a backlog answered at once", advert: 200 * ms, from: 4500, to: 5100, backlog: true, frozen: 500 * ms},
		// The probe sent at 4.49 s was answered at 4.65 s: the node ran
		// then, 350 ms before the VIP was taken.
		{name: "a late answer inside the silence", advert: 200 * ms, from: 4500, to: 5100, lateAnswer: 160},
		{name: "the node removed the VIP itself", advert: 200 * ms, changes: moved, from: 4500, to: 5100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := starved()
			d.Advert = tc.advert
			d.Records[0].Advert = tc.recordAdvert
			d.Holdings[vipA] = double
			if tc.changes != nil {
				d.Holdings[vipA] = tc.changes
			}
			d.Controls = [][]Probe{probes(20000, "node1"), probes(20000, "node2"), probes(20000, "node3")}
			d.Controls6 = [][]Probe{probes(20000, "node1"), probes(20000, "node2"), probes(20000, "node3")}
			if !tc.only6 {
				d.Controls[tc.silent] = probes(20000, names3[tc.silent], [2]int{tc.from, tc.to})
			}
			if !tc.only4 {
				d.Controls6[tc.silent] = probes(20000, names3[tc.silent], [2]int{tc.from, tc.to})
			}
			if tc.backlog {
				for _, ps := range [][]Probe{d.Controls[tc.silent], d.Controls6[tc.silent]} {
					for i := range ps {
						if ms := ps[i].Sent.Sub(at(0)).Milliseconds(); ms >= int64(tc.from) && ms < int64(tc.to) {
							ps[i] = Probe{Sent: ps[i].Sent, Done: at(tc.to), OK: true, Node: names3[tc.silent]}
						}
					}
				}
			}
			if tc.lateAnswer > 0 {
				p := &d.Controls6[tc.silent][(tc.from-10)/10]
				p.Done = p.Sent.Add(time.Duration(tc.lateAnswer) * ms)
			}
			if tc.stall != nil {
				d.Stalls = []Interval{*tc.stall}
			}
			a := Analyse(d)
			if len(a.Handovers) != 1 {
				t.Fatalf("handovers %+v, want one", a.Handovers)
			}
			h := a.Handovers[0]
			if h.Frozen != tc.frozen || h.Excused != -1 || h.Len != 112*ms {
				t.Errorf("handover %+v, want 112 ms, frozen %s, no other fault excusing it", h, tc.frozen)
			}
			var bad []Violation
			for _, v := range a.Violations {
				if strings.HasPrefix(v.What, "handover") {
					bad = append(bad, v)
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tc.frozen > 0]; len(bad) != want {
				t.Errorf("handover violations %+v, want %d", bad, want)
			}
			notes := strings.Join(handoverNotes(d, &a, 0), "; ")
			if freeze := strings.Contains(notes, "had not answered at its own addresses for "+fmtDur(tc.frozen)); freeze != (tc.frozen > 0) {
				t.Errorf("notes %q: the freeze named %v, want %v", notes, freeze, tc.frozen > 0)
			}
		})
	}
	// A handover under way when the fault began is judged where it
	// began: node1 silent from 1.6 s, node2 beside it from 1.9 s (300
	// ms), the starve from 2 s.
	d := starved()
	d.Advert = 200 * ms
	d.Holdings[vipA] = []HolderChange{{At: at(-500), Holders: []string{"node1"}}, {At: at(1900), Holders: []string{"node1", "node2"}},
		{At: at(2112), Holders: []string{"node1"}}}
	d.Controls = [][]Probe{probes(20000, "node1", [2]int{1600, 2200}), probes(20000, "node2"), probes(20000, "node3")}
	d.Controls6 = [][]Probe{probes(20000, "node1", [2]int{1600, 2200}), probes(20000, "node2"), probes(20000, "node3")}
	if a := Analyse(d); len(a.Handovers) != 1 || a.Handovers[0].Frozen != 0 || !a.Handovers[0].At.Equal(at(2000)) {
		t.Errorf("handovers %+v, want one from 2 s, not the freeze's (300 ms silent when it began)", a.Handovers)
	}
}
