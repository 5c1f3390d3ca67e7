package splitbrain

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// dupRun drives duplicates through a script on a fake clock: at each step
// the VIPs held, the claims received, and what is due.
type dupRun struct {
	t   *testing.T
	d   *duplicates
	now time.Time
	// probes and changes collect what the machine asked for.
	probes  map[netip.Addr][]time.Duration
	changes []conflictChange
	start   time.Time
}

func newDupRun(t *testing.T) *dupRun {
	start := time.Unix(1000, 0)
	return &dupRun{t: t, d: newDuplicates(timing{probe: 2 * time.Second, gap: 100 * time.Millisecond, confirm: time.Second}), now: start, start: start, probes: map[netip.Addr][]time.Duration{}}
}

func (r *dupRun) held(vs ...netip.Addr) {
	probe, ended := r.d.setHeld(r.now, vs)
	r.record(probe, ended)
}

func (r *dupRun) record(probe []netip.Addr, changes []conflictChange) {
	for _, v := range probe {
		r.probes[v] = append(r.probes[v], r.now.Sub(r.start))
	}
	r.changes = append(r.changes, changes...)
}

// until advances the clock to at (since the start), running every round
// that ends on the way, and calls claim (when not nil) after each probe.
func (r *dupRun) until(at time.Duration, claim func(v netip.Addr)) {
	for {
		next, ok := r.d.next()
		if !ok || next.Sub(r.start) > at {
			break
		}
		r.now = next
		probe, changes := r.d.due(r.now, 0)
		r.record(probe, changes)
		if claim != nil {
			for _, v := range probe {
				claim(v)
			}
		}
	}
	r.now = r.start.Add(at)
}

func TestDuplicates(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.100")
	other := netip.MustParseAddr("192.0.2.101")
	answer := func(r *dupRun) func(v netip.Addr) {
		return func(v netip.Addr) {
			if v == vip {
				r.d.claim(r.now, v, macB)
			}
		}
	}

	t.Run("a newly held VIP is probed at once; a conflict starts after two answered rounds", func(t *testing.T) {
		r := newDupRun(t)
		r.held(vip, other)
		// The other host answers the first probe at once.
		r.d.claim(r.now, vip, macB)
		r.until(2500*time.Millisecond, answer(r))
		if len(r.changes) != 0 {
			t.Fatalf("a conflict after one answered round: %+v", r.changes)
		}
		r.until(3500*time.Millisecond, answer(r))
		if len(r.changes) != 1 || !r.changes[0].started || r.changes[0].vip != vip || r.changes[0].macs[0].String() != macB.String() {
			t.Fatalf("changes %+v, want the conflict on %s with %s to start", r.changes, vip, macB)
		}
		if at := r.probes[vip][0]; at != 0 {
			t.Errorf("first probe at %v, want at once", at)
		}
		if got := r.d.conflicts(); len(got) != 1 || got[vip] == nil {
			t.Errorf("conflicts %v, want only %s", got, vip)
		}
	})

	t.Run("a normal handover (the old holder answers once) is no conflict", func(t *testing.T) {
		r := newDupRun(t)
		r.held(vip)
		r.d.claim(r.now, vip, macB)
		r.until(30*time.Second, nil)
		if len(r.changes) != 0 {
			t.Errorf("changes %+v, want none", r.changes)
		}
	})

	t.Run("a conflict ends after two silent rounds, and when the VIP leaves", func(t *testing.T) {
		r := newDupRun(t)
		r.held(vip, other)
		r.d.claim(r.now, vip, macB)
		// Rounds end at 2, 3 (the conflict starts), then every second
		// while the conflict lasts.
		r.until(9500*time.Millisecond, answer(r))
		if len(r.changes) != 1 {
			t.Fatalf("changes %+v, want one start", r.changes)
		}
		if got := r.probes[vip]; !slices.Equal(got[len(got)-3:], []time.Duration{7 * time.Second, 8 * time.Second, 9 * time.Second}) {
			t.Errorf("probes during the conflict at %v, want every second", got)
		}
		// The other host lets go after answering the probe at 9 s: the
		// round to 10 s was answered, the one to 11 s is silent, and one
		// silent round is not enough.
		r.until(11500*time.Millisecond, nil)
		if len(r.changes) != 1 {
			t.Fatalf("the conflict ended after one silent round: %+v", r.changes)
		}
		r.until(12500*time.Millisecond, nil)
		if len(r.changes) != 2 || r.changes[1].started || r.changes[1].released || r.changes[1].vip != vip {
			t.Fatalf("changes %+v, want the conflict to end", r.changes)
		}
		if r.changes[1].lasted <= 0 {
			t.Errorf("lasted %v", r.changes[1].lasted)
		}
		// A new conflict, then this node releases the VIP.
		r.until(30*time.Second, answer(r))
		if len(r.changes) != 3 || !r.changes[2].started {
			t.Fatalf("changes %+v, want a second start", r.changes)
		}
		r.held(other)
		if len(r.changes) != 4 || !r.changes[3].released || r.changes[3].vip != vip {
			t.Fatalf("changes %+v, want the conflict to end as released", r.changes)
		}
		if got := r.d.conflicts(); len(got) != 0 {
			t.Errorf("conflicts %v after the release", got)
		}
	})

	t.Run("a claim between probes cuts a long round short", func(t *testing.T) {
		r := newDupRun(t)
		r.d.interval = 10 * time.Second
		r.held(vip)
		r.until(3*time.Second, nil) // rounds: 0-2 s, then 2-12 s
		r.d.claim(r.now, vip, macB) // at 3 s: the round ends at 5 s
		r.until(6500*time.Millisecond, answer(r))
		if len(r.changes) != 1 || !r.changes[0].started {
			t.Fatalf("changes %+v, want a start by 6 s", r.changes)
		}
		if got := r.probes[vip]; !slices.Equal(got, []time.Duration{0, 2 * time.Second, 5 * time.Second, 6 * time.Second}) {
			t.Errorf("probes at %v", got)
		}
	})

	t.Run("claims on VIPs not held here do not count", func(t *testing.T) {
		r := newDupRun(t)
		r.held(other)
		if r.d.claim(r.now, vip, macB) {
			t.Error("a claim on a VIP not held here counted")
		}
		r.until(30*time.Second, answer(r))
		if len(r.changes) != 0 {
			t.Errorf("changes %+v, want none", r.changes)
		}
	})

	t.Run("rounds go on every interval while nothing changes", func(t *testing.T) {
		r := newDupRun(t)
		r.held(vip)
		r.until(9*time.Second, nil)
		want := []time.Duration{0, 2 * time.Second, 4 * time.Second, 6 * time.Second, 8 * time.Second}
		if !slices.Equal(r.probes[vip], want) {
			t.Errorf("probes at %v, want %v", r.probes[vip], want)
		}
	})

	t.Run("several other hosts", func(t *testing.T) {
		r := newDupRun(t)
		r.held(vip)
		both := func(v netip.Addr) {
			r.d.claim(r.now, v, macB)
			r.d.claim(r.now, v, macA)
			r.d.claim(r.now, v, macB)
		}
		both(vip)
		r.until(5*time.Second, both)
		got := r.d.conflicts()[vip]
		if len(got) != 2 || got[0].String() != macA.String() || got[1].String() != macB.String() {
			t.Errorf("conflict MACs %v, want %s and %s, sorted, once each", got, macA, macB)
		}
	})
}

// TestDuplicatesScale: rounds stretch with the number of VIPs held, so a
// node sends one probe per gap on average; with a spread, VIPs taken
// together end their rounds at different times, each within the spread;
// without a grid each at its own time, with one on the grid's steps, so
// the loop wakes once a step.
func TestDuplicatesScale(t *testing.T) {
	for _, grid := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("grid %v", grid), func(t *testing.T) {
			d := newDuplicates(timing{probe: 2 * time.Second, gap: 100 * time.Millisecond, confirm: time.Second, spread: 0.25, grid: grid})
			start := time.Unix(1000, 0)
			var vips []netip.Addr
			for i := 1; i <= 150; i++ {
				vips = append(vips, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}))
			}
			d.setHeld(start, vips)
			d.due(start.Add(2*time.Second), 0)
			ends := map[time.Time]bool{}
			for _, v := range vips {
				st := d.vips[v]
				lead := st.end.Sub(start.Add(2*time.Second + 15*time.Second))
				if lead < 0 || lead >= 15*time.Second/4+grid {
					t.Errorf("%s: round ends %v after 15 s, want within a quarter of it and one grid step", v, lead)
				}
				if grid > 0 && st.end.Truncate(grid) != st.end {
					t.Errorf("%s: round ends at %v, off the %v grid", v, st.end, grid)
				}
				ends[st.end] = true
			}
			if grid == 0 && len(ends) < 100 {
				t.Errorf("150 VIPs end their rounds at only %d distinct times", len(ends))
			}
			if grid > 0 && (len(ends) < 3 || len(ends) > 5) {
				t.Errorf("150 VIPs end their rounds at %d distinct times, want the 4 or 5 grid steps of the spread", len(ends))
			}
			// Over a minute, about 10 probes a second, not 75, in
			// about one wake-up a second with the grid.
			probes, wakes := 0, 0
			now := start.Add(2 * time.Second)
			for now.Before(start.Add(62 * time.Second)) {
				next, _ := d.next()
				now = next
				p, _ := d.due(now, 0)
				probes += len(p)
				wakes++
			}
			if probes < 400 || probes > 700 {
				t.Errorf("%d probes in a minute for 150 VIPs, want about 600 (one per 100 ms, less the spread)", probes)
			}
			if grid > 0 && wakes > 61 {
				t.Errorf("%d wake-ups in a minute, want one per grid step at most", wakes)
			}
			if grid == 0 && wakes < 300 {
				t.Errorf("%d wake-ups in a minute without a grid, want about one per probe", wakes)
			}
		})
	}
}

// TestDuplicatesGridKeepsDetection: the grid moves regular rounds only; a
// conflict starts and ends as fast as without it.
func TestDuplicatesGridKeepsDetection(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.100")
	for _, grid := range []time.Duration{0, time.Second} {
		r := newDupRun(t)
		r.d.grid = grid
		r.now = r.now.Add(300 * time.Millisecond) // off the grid
		r.held(vip)
		answering := true
		claim := func(v netip.Addr) {
			if answering {
				r.d.claim(r.now, v, macB)
			}
		}
		claim(vip)
		r.until(3500*time.Millisecond, claim)
		if len(r.changes) != 1 || !r.changes[0].started {
			t.Fatalf("grid %v: changes %+v by 3.5 s, want the conflict started (rounds end at 2.3 and 3.3 s)", grid, r.changes)
		}
		answering = false
		r.until(6500*time.Millisecond, claim)
		if len(r.changes) != 2 || r.changes[1].started {
			t.Errorf("grid %v: changes %+v by 6.5 s, want the conflict over (the round answered at 3.3 s, then two silent one-second rounds)", grid, r.changes)
		}
	}
}

// TestDuplicateEndedEarlyLasts: a conflict confirmed by a round that the
// loop ended early (within its batch) started when the loop ran, not at
// the round's due time: released 1 ms later, it lasted 1 ms, not less
// than nothing.
func TestDuplicateEndedEarlyLasts(t *testing.T) {
	v := netip.MustParseAddr("192.0.2.100")
	mac := []byte{2, 0, 0, 0, 0, 1}
	d := newDuplicates(timing{probe: 2 * time.Second, gap: 100 * time.Millisecond, confirm: time.Second})
	now := time.Unix(1000, 0)
	d.setHeld(now, []netip.Addr{v})
	var started bool
	for range 4 {
		d.claim(now, v, mac)
		next, _ := d.next()
		now = next.Add(-50 * time.Millisecond)
		_, changes := d.due(now, 100*time.Millisecond)
		for _, c := range changes {
			started = started || c.started
		}
		if started {
			break
		}
	}
	if !started {
		t.Fatal("no conflict started from a host answering every round")
	}
	_, ended := d.setHeld(now.Add(time.Millisecond), nil)
	if len(ended) != 1 || !ended[0].released || ended[0].lasted != time.Millisecond {
		t.Errorf("released 1 ms after the conflict began: %+v, want one release that lasted 1ms", ended)
	}
}
