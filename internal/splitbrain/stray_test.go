package splitbrain

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
)

func TestStrays(t *testing.T) {
	v1 := netip.MustParseAddr("192.0.2.100")
	v2 := netip.MustParseAddr("192.0.2.101")
	v3 := netip.MustParseAddr("192.0.2.102")
	instance := map[netip.Addr]string{v1: "X_VIP_1", v2: "X_VIP_2", v3: "X_VIP_2"}
	start := time.Unix(1000, 0)
	at := start.Add
	note := func(name string, st keepalived.State) keepalived.Notification {
		return keepalived.Notification{Instance: name, State: st, Priority: 100}
	}
	const grace = 2 * time.Second

	t.Run("a VIP added by hand to a BACKUP node is a stray after the grace period", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(5*time.Second), []netip.Addr{v1})
		if got := s.due(at(6 * time.Second)); len(got) != 0 {
			t.Errorf("due within the grace period: %v", got)
		}
		if next, ok := s.next(); !ok || !next.Equal(at(7*time.Second)) {
			t.Errorf("next = %v %v, want %v", next, ok, at(7*time.Second))
		}
		if got := s.due(at(7 * time.Second)); !slices.Equal(got, []netip.Addr{v1}) {
			t.Errorf("due = %v, want [%s]", got, v1)
		}
	})

	t.Run("MASTER's VIPs are never strays", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_2", keepalived.StateNameBackup))
		s.setHeld(at(time.Millisecond), []netip.Addr{v2, v3}) // keepalived adds, then notifies
		s.notify(at(2*time.Millisecond), note("X_VIP_2", keepalived.StateNameMaster))
		if got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none", got)
		}
		if _, ok := s.next(); ok {
			t.Error("next reports a stray to come")
		}
	})

	t.Run("leaving MASTER: the VIP left behind is a stray a grace period after the state change", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.notify(at(10*time.Second), note("X_VIP_1", keepalived.StateNameFault))
		if got := s.due(at(11 * time.Second)); len(got) != 0 {
			t.Errorf("due 1 s after leaving MASTER: %v", got)
		}
		if got := s.due(at(12 * time.Second)); len(got) != 1 {
			t.Errorf("due = %v, want [%s]", got, v1)
		}
		// A repeated FAULT does not restart the grace period.
		s.notify(at(11*time.Second), note("X_VIP_1", keepalived.StateNameFault))
		if got := s.due(at(12 * time.Second)); len(got) != 1 {
			t.Errorf("due after a repeated state = %v, want [%s]", got, v1)
		}
	})

	t.Run("events are not states: a master that hears a lower priority stays MASTER", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.notify(at(time.Second), note("X_VIP_1", "MASTER_RX_LOWER_PRI"))
		if got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none", got)
		}
	})

	t.Run("a normal release: the VIP goes with the state change", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameMaster))
		s.setHeld(at(0), []netip.Addr{v1})
		s.setHeld(at(10*time.Second), nil)
		s.notify(at(10*time.Second), note("X_VIP_1", keepalived.StateNameBackup))
		if got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none", got)
		}
	})

	t.Run("an instance keepalived has not announced is left alone", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.setHeld(at(0), []netip.Addr{v1})
		if got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v, want none: the state is unknown", got)
		}
	})

	t.Run("after a restart the old states no longer count", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(0), []netip.Addr{v1})
		s.forget()
		if got := s.due(at(time.Hour)); len(got) != 0 {
			t.Errorf("due = %v after forget, want none", got)
		}
		// The new keepalived announces BACKUP: the grace period runs from
		// that line.
		s.notify(at(time.Hour), note("X_VIP_1", keepalived.StateNameBackup))
		if got := s.due(at(time.Hour + grace - time.Millisecond)); len(got) != 0 {
			t.Errorf("due = %v within the grace period after the restart", got)
		}
		if got := s.due(at(time.Hour + grace)); len(got) != 1 {
			t.Errorf("due = %v, want [%s]", got, v1)
		}
	})

	t.Run("a failed removal is tried again a grace period later", func(t *testing.T) {
		s := newStrays(grace, instance)
		s.notify(at(0), note("X_VIP_1", keepalived.StateNameBackup))
		s.setHeld(at(0), []netip.Addr{v1})
		s.failed(at(grace), v1)
		if got := s.due(at(grace + time.Second)); len(got) != 0 {
			t.Errorf("due = %v right after a failure", got)
		}
		if got := s.due(at(2 * grace)); len(got) != 1 {
			t.Errorf("due = %v, want a retry", got)
		}
		// Once gone and back, the failure is forgotten.
		s.setHeld(at(2*grace), nil)
		s.setHeld(at(3*grace), []netip.Addr{v1})
		if next, ok := s.next(); !ok || !next.Equal(at(4*grace)) {
			t.Errorf("next = %v %v, want %v", next, ok, at(4*grace))
		}
	})
}
