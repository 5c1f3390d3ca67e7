package chaos

import (
	"math"
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		q       float64
		buckets map[float64]uint64
		want    float64
	}{
		{0.5, map[float64]uint64{0.5: 0, 0.6: 2, 0.7: 4, inf: 4}, 0.6},
		{0.5, map[float64]uint64{0.5: 1, 0.6: 1, 0.7: 3, inf: 3}, 0.6 + 0.1*0.5/2},
		{0.5, map[float64]uint64{0.1: 2, inf: 2}, 0.05},
		{0.99, map[float64]uint64{1: 1, inf: 2}, 1},
	} {
		if got := histogramQuantile(c.q, c.buckets); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("histogramQuantile(%v, %v) = %v, want %v", c.q, c.buckets, got, c.want)
		}
	}
	if got := histogramQuantile(0.5, map[float64]uint64{1: 0, inf: 0}); !math.IsNaN(got) {
		t.Errorf("no observations: %v, want NaN", got)
	}
}

func TestNewTakeovers(t *testing.T) {
	inf := math.Inf(1)
	before := map[string]takeoverHistogram{
		"node1": {count: 2, sum: 1.0, buckets: map[float64]uint64{0.5: 2, 1: 2, inf: 2}},
		"node2": {count: 5, sum: 3.0, buckets: map[float64]uint64{0.5: 1, 1: 5, inf: 5}},
	}
	after := map[string]takeoverHistogram{
		// Two new takeovers of 0.6 s and 0.8 s.
		"node1": {count: 4, sum: 2.4, buckets: map[float64]uint64{0.5: 2, 1: 4, inf: 4}},
		// Restarted: one takeover since.
		"node2": {count: 1, sum: 0.3, buckets: map[float64]uint64{0.5: 1, 1: 1, inf: 1}},
	}
	took := newTakeovers(before, after)
	var ms []time.Duration
	for _, s := range took.samples {
		ms = append(ms, s.Value.Round(time.Millisecond))
	}
	if len(ms) != 3 {
		t.Fatalf("samples %v, want 3", ms)
	}
	var n700, n300 int
	for _, d := range ms {
		switch d {
		case 700 * time.Millisecond:
			n700++
		case 300 * time.Millisecond:
			n300++
		}
	}
	if n700 != 2 || n300 != 1 {
		t.Errorf("samples %v, want two of node1's mean 700ms and node2's 300ms", ms)
	}
	if want := map[float64]uint64{0.5: 1, 1: 3, inf: 3}; len(took.buckets) != len(want) || took.buckets[0.5] != 1 || took.buckets[1] != 3 || took.buckets[inf] != 3 {
		t.Errorf("buckets %v, want %v", took.buckets, want)
	}
}
