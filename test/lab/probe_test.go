package lab

import (
	"net/netip"
	"testing"
	"time"
)

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	ms := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }
	tests := []struct {
		name  string
		sent  []time.Time
		acked []bool
		since time.Time
		want  time.Duration
	}{
		{"none sent", nil, nil, time.Time{}, 0},
		{"all answered", at(0, 5, 10, 15), []bool{true, true, true, true}, time.Time{}, 5 * time.Millisecond},
		{"a run lost in the middle", at(0, 5, 10, 15, 20, 25), []bool{true, true, false, false, true, true}, time.Time{}, 15 * time.Millisecond},
		{"the longest of two runs", at(0, 5, 10, 15, 20, 25, 30), []bool{true, false, true, false, false, false, true}, time.Time{}, 20 * time.Millisecond},
		{"lost at the start", at(0, 5, 10, 15), []bool{false, false, true, true}, time.Time{}, 10 * time.Millisecond},
		{"lost to the end", at(0, 5, 10, 15), []bool{true, false, false, false}, time.Time{}, 15 * time.Millisecond},
		{"never answered", at(0, 5, 10), []bool{false, false, false}, time.Time{}, 10 * time.Millisecond},
		{"since: a longer run before it is left out", at(0, 5, 10, 15, 20, 25, 30), []bool{true, false, false, false, true, false, true}, ms(21), 10 * time.Millisecond},
		{"since: a run going on at it counts whole", at(0, 5, 10, 15, 20, 25, 30), []bool{true, false, false, false, true, false, true}, ms(12), 20 * time.Millisecond},
		{"since: lost to the end after it", at(0, 5, 10, 15), []bool{true, true, false, false}, ms(12), 10 * time.Millisecond},
		{"since: after the last probe", at(0, 5, 10), []bool{true, false, true}, ms(11), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LongestGap(tt.sent, tt.acked, tt.since); got != tt.want {
				t.Errorf("LongestGap = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMachineGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }
	// probe makes attempts every 10 ms up to 1 s, unanswered in the given
	// [from, to) spans (never answered when all is false).
	probe := func(all bool, lost ...[2]int) ([]time.Time, []bool) {
		var sent []time.Time
		var ok []bool
		for m := 0; m < 1000; m += 10 {
			sent = append(sent, ms(m))
			a := all
			for _, l := range lost {
				if m >= l[0] && m < l[1] {
					a = false
				}
			}
			ok = append(ok, a)
		}
		return sent, ok
	}
	controls := func(ps ...func() ([]time.Time, []bool)) *TCPProbe {
		p := &TCPProbe{}
		for _, f := range ps {
			s, o := f()
			p.targets = append(p.targets, netip.AddrPort{})
			p.sent, p.ok = append(p.sent, s), append(p.ok, o)
		}
		return p
	}
	node := func(all bool, lost ...[2]int) func() ([]time.Time, []bool) {
		return func() ([]time.Time, []bool) { return probe(all, lost...) }
	}
	// Three nodes: all out from 300 to 500 ms together (the gap runs from
	// the last answer, 290, to the next, 500); node1 alone at 700.
	c := controls(node(true, [2]int{300, 500}, [2]int{700, 800}), node(true, [2]int{300, 500}), node(true, [2]int{250, 520}))
	got := MachineGaps(c, 50*time.Millisecond)
	if len(got) != 1 || !got[0].Start.Equal(ms(290)) || !got[0].End.Equal(ms(500)) {
		t.Fatalf("MachineGaps = %v, want one from 290 to 500 ms", got)
	}
	// A VIP out from 200 to 520 ms: 330 ms whole, 120 ms less the span.
	sent, ok := probe(true, [2]int{200, 520})
	if g := LongestGapExcept(sent, ok, time.Time{}, got); g != 120*time.Millisecond {
		t.Errorf("LongestGapExcept = %v, want 120ms", g)
	}
	if g := LongestGap(sent, ok, time.Time{}); g != 330*time.Millisecond {
		t.Errorf("LongestGap = %v, want 330ms", g)
	}
	// A node that never answered is no witness; one witness is not enough.
	if got := MachineGaps(controls(node(false), node(true, [2]int{300, 500})), 50*time.Millisecond); len(got) != 0 {
		t.Errorf("MachineGaps with one witness = %v, want none", got)
	}
	// Two witnesses out at different times: nothing in common.
	if got := MachineGaps(controls(node(true, [2]int{100, 200}), node(true, [2]int{300, 400})), 50*time.Millisecond); len(got) != 0 {
		t.Errorf("MachineGaps with separate gaps = %v, want none", got)
	}
}
