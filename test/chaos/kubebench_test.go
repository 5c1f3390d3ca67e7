package chaos

import (
	"testing"
	"time"
)

// TestAnsweredElsewhere: the first answer from another node after the
// fault counts, less the round trip the holder answered in before it; the
// old holder's answers, failures and probes sent before the fault do not.
func TestAnsweredElsewhere(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ps := []Probe{
		{Sent: at(-20), Done: at(-18), OK: true, Node: "node1"},
		{Sent: at(-10), Done: at(-8), OK: true, Node: "node1"},
		{Sent: at(-5), Done: at(-3), OK: true, Node: "node2"}, // before the fault
		{Sent: at(0), Done: at(250), Err: "timeout"},
		{Sent: at(10), Done: at(11), OK: true, Node: "node1"}, // the old holder, not yet gone
		{Sent: at(20), Done: at(270), Err: "timeout"},
		{Sent: at(2990), Done: at(3010), OK: true, Node: "node2"},
		{Sent: at(3000), Done: at(3001), OK: true, Node: "node2"},
	}
	got, ok := answeredElsewhere(ps, t0, "node1")
	if !ok || !got.Equal(at(3008)) {
		t.Errorf("answeredElsewhere = %v, %v; want %v", got.Sub(t0), ok, 3008*time.Millisecond)
	}
	if _, ok := answeredElsewhere(ps[:6], t0, "node1"); ok {
		t.Error("answeredElsewhere found an answer from another node where none came after the fault")
	}
	// An answer quicker than the last round trip counts from its sending.
	ps[6].Done = at(2991)
	if got, _ := answeredElsewhere(ps, t0, "node1"); !got.Equal(at(2990)) {
		t.Errorf("answeredElsewhere = %v, want the probe's sending, 2.99s", got.Sub(t0))
	}
}
