package lab

import (
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
