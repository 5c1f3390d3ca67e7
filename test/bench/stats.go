package bench

import (
	"slices"
	"time"
)

// Sample is one measurement with the VRRP limit that applies to it (zero:
// none).
type Sample struct {
	Value time.Duration
	Limit time.Duration
}

// Quantile returns the q-quantile (0..1) of ds by the nearest-rank method,
// or 0 for no values.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	// Nearest rank: the smallest value with at least q of the values at or
	// below it.
	rank := int(q*float64(len(s))+0.999999999) - 1
	rank = max(0, min(rank, len(s)-1))
	return s[rank]
}

// Median is the middle value (the mean of the two middle ones for an even
// count).
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return sortedMedian(slices.Sorted(slices.Values(ds)))
}

// sortedMedian is the median of values already sorted, not empty.
func sortedMedian[T ~int64 | ~float64](s []T) T {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Worst is the largest value.
func Worst(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

func values(ss []Sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.Value
	}
	return out
}

func limits(ss []Sample) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if s.Limit > 0 {
			out = append(out, s.Limit)
		}
	}
	return out
}
