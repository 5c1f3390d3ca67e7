package splitbrain

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
)

func TestOwnershipStrays(t *testing.T) {
	v1 := netip.MustParseAddr("192.0.2.100")
	v2 := netip.MustParseAddr("192.0.2.101")
	v3 := netip.MustParseAddr("192.0.2.102")
	instance := map[netip.Addr]string{v1: "X_VIP_1", v2: "X_VIP_2", v3: "X_VIP_2"}
	start := time.Unix(1000, 0)
	at := start.Add
	note := func(name string, st keepalived.State) keepalived.Notification {
		return keepalived.Notification{Instance: name, State: st, Priority: 100}
	}
	const grace, mend = 2 * time.Second, time.Second

	t.Run("a VIP added by hand to a BACKUP node is a stray after the grace period", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(5*time.Second), []netip.Addr{v1})
		if got := strays(s, at(6*time.Second)); len(got) != 0 {
			t.Errorf("due within the grace period: %v", got)
		}
		if next, ok := s.next(); !ok || !next.Equal(at(7*time.Second)) {
			t.Errorf("next = %v %v, want %v", next, ok, at(7*time.Second))
		}
		if got := strays(s, at(7*time.Second)); !slices.Equal(got, []netip.Addr{v1}) {
			t.Errorf("due = %v, want [%s]", got, v1)
		}
	})

	t.Run("MASTER's VIPs are never strays", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_2", keepalived.StateNameBackup))
		s.setHeld(at(time.Millisecond), []netip.Addr{v2, v3}) // keepalived adds, then notifies
		s.notify(at(2*time.Millisecond), note("X_VIP_2", keepalived.StateNameMaster))
		if got := strays(s, at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none", got)
		}
		if _, ok := s.next(); ok {
			t.Error("next reports a stray to come")
		}
	})

	t.Run("leaving MASTER: the VIP left behind is a stray a grace period after the state change", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.notify(at(10*time.Second), note("X_VIP_1", keepalived.StateNameFault))
		if got := strays(s, at(11*time.Second)); len(got) != 0 {
			t.Errorf("due 1 s after leaving MASTER: %v", got)
		}
		if got := strays(s, at(12*time.Second)); len(got) != 1 {
			t.Errorf("due = %v, want [%s]", got, v1)
		}
		// A repeated FAULT does not restart the grace period.
		s.notify(at(11*time.Second), note("X_VIP_1", keepalived.StateNameFault))
		if got := strays(s, at(12*time.Second)); len(got) != 1 {
			t.Errorf("due after a repeated state = %v, want [%s]", got, v1)
		}
	})

	t.Run("events are not states: a master that hears a lower priority stays MASTER", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.notify(at(time.Second), note("X_VIP_1", "MASTER_RX_LOWER_PRI"))
		if got := strays(s, at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none", got)
		}
	})

	t.Run("a normal release: the VIP goes with the state change", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.setHeld(at(10*time.Second), nil)
		s.notify(at(10*time.Second), note("X_VIP_1", keepalived.StateNameBackup))
		if got := strays(s, at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none", got)
		}
	})

	t.Run("an instance keepalived has not announced is left alone", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.setHeld(at(0), []netip.Addr{v1})
		if got := strays(s, at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none: the state is unknown", got)
		}
	})

	t.Run("after a restart the old states no longer count", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(0), []netip.Addr{v1})
		s.forget()
		if got := strays(s, at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v after forget, want none", got)
		}
		// The new keepalived announces BACKUP: the grace period runs from
		// that line.
		s.notify(at(time.Hour), note("X_VIP_1", keepalived.StateNameBackup))
		if got := strays(s, at(time.Hour+grace-time.Millisecond)); len(got) != 0 {
			t.Errorf("due = %v within the grace period after the restart", got)
		}
		if got := strays(s, at(time.Hour+grace)); len(got) != 1 {
			t.Errorf("due = %v, want [%s]", got, v1)
		}
	})

	t.Run("a failed removal is tried again a grace period later", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(0), []netip.Addr{v1})
		s.failed(at(grace), v1)
		if got := strays(s, at(grace+time.Second)); len(got) != 0 {
			t.Errorf("due = %v right after a failure", got)
		}
		if got := strays(s, at(2*grace)); len(got) != 1 {
			t.Errorf("due = %v, want a retry", got)
		}
		// Once gone and back, the failure is forgotten.
		s.setHeld(at(2*grace), nil)
		s.setHeld(at(3*grace), []netip.Addr{v1})
		if next, ok := s.next(); !ok || !next.Equal(at(4*grace)) {
			t.Errorf("next = %v %v, want %v", next, ok, at(4*grace))
		}
	})

	t.Run("a MASTER without its VIP: missing a mend period after the state or the listing", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_2", keepalived.StateNameMaster))
		s.setHeld(at(10*time.Millisecond), []netip.Addr{v3})
		if _, got := s.due(at(mend)); len(got) != 0 {
			t.Errorf("missing within the mend period: %v", got)
		}
		if next, ok := s.next(); !ok || !next.Equal(at(mend+10*time.Millisecond)) {
			t.Errorf("next = %v %v, want %v", next, ok, at(mend+10*time.Millisecond))
		}
		if st, got := s.due(at(mend + 10*time.Millisecond)); !slices.Equal(got, []netip.Addr{v2}) || len(st) != 0 {
			t.Errorf("due = %v %v, want no stray and [%s] missing", st, got, v2)
		}
	})

	t.Run("nothing is missing before the first listing, nor from an instance that is not MASTER or unknown", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		if _, got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("missing before any listing: %v", got)
		}
		s.setHeld(at(0), nil)
		s.notify(at(time.Second), note("X_VIP_1", keepalived.StateNameBackup))
		if _, got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("missing from a BACKUP or an unknown instance: %v", got)
		}
		s.notify(at(2*time.Second), note("X_VIP_1", keepalived.StateNameMaster))
		s.forget()
		if _, got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("missing after keepalived restarted: %v", got)
		}
	})

	t.Run("a normal take-over: the VIP comes with the state change", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.setHeld(at(0), nil)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(5*time.Second), []netip.Addr{v1}) // keepalived adds, then notifies
		s.notify(at(5*time.Second+time.Millisecond), note("X_VIP_1", keepalived.StateNameMaster))
		if st, got := s.due(at(time.Hour)); len(got)+len(st) != 0 {
			t.Errorf("due = %v %v, want none", st, got)
		}
	})

	// putBackThenBackup: X_VIP_1 MASTER without v1 at 0, the guard puts
	// it back, the listing at 1 s has it, the instance is BACKUP at 10 s.
	putBackThenBackup := func() *ownership {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), nil)
		s.put(v1)
		s.setHeld(at(time.Second), []netip.Addr{v1})
		s.notify(at(10*time.Second), note("X_VIP_1", keepalived.StateNameBackup))
		return s
	}

	t.Run("a VIP put back is a stray as soon as its instance leaves MASTER", func(t *testing.T) {
		s := putBackThenBackup()
		if got := strays(s, at(10*time.Second)); !slices.Equal(got, []netip.Addr{v1}) {
			t.Errorf("strays = %v, want [%s] at once: keepalived leaves it there", got, v1)
		}
	})

	t.Run("a VIP put back is keepalived's again once its instance becomes MASTER again", func(t *testing.T) {
		s := putBackThenBackup()
		s.notify(at(10*time.Second+time.Millisecond), note("X_VIP_1", keepalived.StateNameMaster))
		s.notify(at(20*time.Second), note("X_VIP_1", keepalived.StateNameBackup))
		if got := strays(s, at(20*time.Second+grace-time.Millisecond)); len(got) != 0 {
			t.Errorf("strays = %v within the grace period: keepalived removes its own", got)
		}
		if got := strays(s, at(20*time.Second+grace)); len(got) != 1 {
			t.Errorf("strays = %v, want [%s]", got, v1)
		}
	})

	t.Run("a stopping keepalived's removed VIPs are not missing, even on its late MASTER line", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.stopAll(at(10 * time.Second))
		s.setHeld(at(10*time.Second+time.Millisecond), nil) // keepalived removes it at once
		// A line written before the SIGTERM, read after it.
		s.notify(at(10*time.Second+2*time.Millisecond), note("X_VIP_1", keepalived.StateNameMaster))
		if _, got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("missing = %v while keepalived stops: it removed them itself", got)
		}
		if _, ok := s.next(); ok {
			t.Error("next reports a change to come")
		}
		s.forget() // the new keepalived
		s.notify(at(time.Hour), note("X_VIP_1", keepalived.StateNameMaster))
		if _, got := s.due(at(time.Hour + mend)); !slices.Equal(got, []netip.Addr{v1}) {
			t.Errorf("missing = %v after a new keepalived's MASTER, want [%s]", got, v1)
		}
	})

	t.Run("a VIP put back is a stray as soon as keepalived is being stopped", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), nil)
		s.put(v1)
		s.setHeld(at(time.Second), []netip.Addr{v1})
		s.stopAll(at(10 * time.Second))
		if got := strays(s, at(10*time.Second)); !slices.Equal(got, []netip.Addr{v1}) {
			t.Errorf("strays = %v, want [%s] at once: the stopping keepalived leaves it there", got, v1)
		}
	})

	t.Run("a failed addition is tried again a mend period later", func(t *testing.T) {
		s := newOwnership(grace, mend, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), nil)
		s.failed(at(mend), v1)
		if _, got := s.due(at(mend + mend/2)); len(got) != 0 {
			t.Errorf("missing = %v right after a failure", got)
		}
		if _, got := s.due(at(2 * mend)); len(got) != 1 {
			t.Errorf("missing = %v, want a retry", got)
		}
	})
}

// strays returns the strays due at now.
func strays(s *ownership, now time.Time) []netip.Addr {
	st, _ := s.due(now)
	return st
}
