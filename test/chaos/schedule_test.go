package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var names3 = []string{"node1", "node2", "node3"}

func TestPlanReplays(t *testing.T) {
	p := DefaultProfile(3, LabKinds)
	a, b := Plan(42, 10*time.Minute, p), Plan(42, 10*time.Minute, p)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two plans of seed 42 differ (-first +second):\n%s", diff)
	}
	if a.Digest() != b.Digest() {
		t.Errorf("digests %s and %s of the same plan", a.Digest(), b.Digest())
	}
	if c := Plan(43, 10*time.Minute, p); c.Digest() == a.Digest() {
		t.Errorf("seeds 42 and 43 drew the same schedule (digest %s)", a.Digest())
	}
	if c := Plan(42, 9*time.Minute, p); c.Digest() == a.Digest() {
		t.Error("a shorter run has the same digest")
	}
}

// TestPlanIsStable pins one seed's schedule: a change to the draw changes
// what every published seed replays, so it must be deliberate (update the
// digest, and say so where seeds were published).
func TestPlanIsStable(t *testing.T) {
	s := Plan(1, 2*time.Minute, DefaultProfile(3, LabKinds))
	const want = "763445f893c6"
	if got := s.Digest(); got != want {
		t.Errorf("seed 1, 2m: digest %s, want %s; the schedule is now:\n%s", got, want, s.String(names3))
	}
}

func TestPlanKeepsItsRules(t *testing.T) {
	for _, p := range []Profile{DefaultProfile(3, LabKinds), KubeProfile(3)} {
		planKeepsItsRules(t, p)
	}
}

func planKeepsItsRules(t *testing.T, p Profile) {
	const d = 10 * time.Minute
	seen := map[Kind]int{}
	for seed := range uint64(300) {
		s := Plan(seed, d, p)
		if len(s.Faults) < 25 {
			t.Errorf("seed %d: %d faults in %s, want at least 25", seed, len(s.Faults), d)
		}
		for i, f := range s.Faults {
			seen[f.Kind]++
			if f.Index != i+1 {
				t.Errorf("seed %d: fault %d has index %d", seed, i, f.Index)
			}
			if f.Start < p.Warmup || f.End() > d-p.Tail {
				t.Errorf("seed %d: #%d %s at %s for %s: outside [%s, %s]", seed, f.Index, f.Kind, f.Start, f.Length, p.Warmup, d-p.Tail)
			}
			info := kinds[f.Kind]
			if info.length[1] > 0 && (f.Length < info.length[0] || f.Length > info.length[1]) {
				t.Errorf("seed %d: #%d %s lasts %s, want %s..%s", seed, f.Index, f.Kind, f.Length, info.length[0], info.length[1])
			}
			if len(f.Nodes) != info.nodes || len(slices.Compact(slices.Sorted(slices.Values(f.Nodes)))) != info.nodes {
				t.Errorf("seed %d: #%d %s targets %v, want %d distinct nodes", seed, f.Index, f.Kind, f.Nodes, info.nodes)
			}
			if f.Kind == Segment && (f.Loss < 0 || f.Loss > 0.05 || f.Delay > 40*time.Millisecond || f.Jitter > f.Delay/2) {
				t.Errorf("seed %d: #%d segment %g %s %s out of range", seed, f.Index, f.Loss, f.Delay, f.Jitter)
			}
			for _, g := range s.Faults[:i] {
				gEnd := g.End() + p.Recovery
				if kinds[g.Kind].all {
					gEnd += time.Duration(p.Nodes) * p.PerNode
				}
				if f.Start >= gEnd {
					continue
				}
				if shareNode(f, g) {
					t.Errorf("seed %d: #%d %s on %v starts at %s, before #%d %s on %v is over (%s)", seed, f.Index, f.Kind, f.Nodes, f.Start, g.Index, g.Kind, g.Nodes, gEnd)
				}
				if kinds[f.Kind].nodes == 0 && !kinds[f.Kind].all && f.Kind == g.Kind && f.Start < g.End()+time.Second {
					t.Errorf("seed %d: %s #%d and #%d overlap", seed, f.Kind, g.Index, f.Index)
				}
				if f.Kind == KeepalivedKill && g.Kind == KeepalivedKill && slices.Equal(f.Nodes, g.Nodes) && f.Start-g.Start < 30*time.Second {
					t.Errorf("seed %d: keepalived killed on %v at %s and %s", seed, f.Nodes, g.Start, f.Start)
				}
			}
			if Down(f.Kind) && downAt(s.Faults[:i+1], p, f.Start) >= p.Nodes {
				t.Errorf("seed %d: #%d %s leaves no node up", seed, f.Index, f.Kind)
			}
		}
	}
	for _, w := range p.Kinds {
		if seen[w.Kind] == 0 {
			t.Errorf("300 seeds never drew %s", w.Kind)
		}
	}
}

func shareNode(f, g Fault) bool {
	if kinds[f.Kind].all || kinds[g.Kind].all {
		return len(f.Nodes) > 0 || len(g.Nodes) > 0 || (kinds[f.Kind].all && kinds[g.Kind].all)
	}
	for _, i := range f.Nodes {
		if slices.Contains(g.Nodes, i) {
			return true
		}
	}
	return false
}

func TestScheduleString(t *testing.T) {
	s := Schedule{Seed: 7, Duration: time.Minute, Faults: []Fault{
		{Index: 1, Kind: Partition, Start: 5 * time.Second, Length: 3500 * time.Millisecond, Nodes: []int{2, 0}},
		{Index: 2, Kind: KeepalivedKill, Start: 9 * time.Second, Nodes: []int{1}},
		{Index: 3, Kind: Segment, Start: 10 * time.Second, Length: 6 * time.Second, Loss: 0.05, Delay: 20 * time.Millisecond, Jitter: 7 * time.Millisecond},
	}}
	got := s.String(names3)
	for _, want := range []string{
		"seed 7, 1m0s, 3 faults, digest " + s.Digest(),
		"#1     5.000s  3.500s   partition: VRRP dropped between node3 and node1",
		"#2     9.000s  -        keepalived-kill on node2",
		"segment: loss 5%, delay 20ms ± 7ms",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("schedule text lacks %q:\n%s", want, got)
		}
	}
}

func TestPlanWithoutKindsOrNodes(t *testing.T) {
	if s := Plan(1, time.Minute, DefaultProfile(1, LabKinds)); len(s.Faults) != 0 {
		t.Errorf("one node: %d faults, want none", len(s.Faults))
	}
	if s := Plan(1, time.Minute, DefaultProfile(3, nil)); len(s.Faults) != 0 {
		t.Errorf("no kinds: %d faults, want none", len(s.Faults))
	}
}
