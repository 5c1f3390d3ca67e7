// Package wait is the one polling helper of the tests: it looks at a
// condition until it holds, with a deadline generous enough for a shared,
// busy machine, where a timed assertion would only measure the load.
package wait

import (
	"testing"
	"time"
)

// Timeout is how long For waits before it fails the test.
const Timeout = 30 * time.Second

// Interval is the time between two looks.
const Interval = 10 * time.Millisecond

// For polls cond until it holds. It fails the test, naming what it waited
// for, after Timeout or when the test ends.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", Timeout, what)
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: the test ended", what)
		case <-tick.C:
		}
	}
}
