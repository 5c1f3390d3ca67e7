package splitbrain

import (
	"net/netip"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// strays finds VIPs of this configuration that sit on the interface while
// keepalived's instance for them is not MASTER. It is a state machine on
// explicit times: the guard's loop feeds it the held VIPs and keepalived's
// notifications and asks it what is due.
//
// A VIP is a stray once it has been on the interface, with its instance
// known to be in another state than MASTER, for the grace period. An
// instance's state is known from keepalived's notify FIFO, which keepalived
// writes right after it adds the VIPs of an instance becoming MASTER and
// right after it removes them on leaving MASTER; a started keepalived
// announces every instance. The grace period therefore only has to cover
// the moment between the address change and the line, and the loop's own
// delays; it is two advert intervals, at least a second. Until keepalived
// has announced an instance (after a start or restart), its VIPs are left
// alone: a VIP is never removed on a guess.
type strays struct {
	grace time.Duration
	// instance names each VIP's vrrp_instance.
	instance map[netip.Addr]string

	heldSince map[netip.Addr]time.Time
	states    map[string]instanceState
	// tried holds, per VIP, when its removal last failed: it is tried
	// again one grace period later.
	tried map[netip.Addr]time.Time
	// nextAt caches next's answer until the inputs change.
	nextAt    time.Time
	nextOK    bool
	nextKnown bool
}

// instanceState is what keepalived last said about an instance.
type instanceState struct {
	state keepalived.State
	since time.Time
}

func newStrays(grace time.Duration, instance map[netip.Addr]string) *strays {
	return &strays{
		grace:     grace,
		instance:  instance,
		heldSince: map[netip.Addr]time.Time{},
		states:    map[string]instanceState{},
		tried:     map[netip.Addr]time.Time{},
	}
}

// setHeld records which VIPs are on the interface now.
func (s *strays) setHeld(now time.Time, held []netip.Addr) {
	s.nextKnown = false
	on := make(map[netip.Addr]bool, len(held))
	for _, v := range held {
		on[v] = true
		if _, ok := s.heldSince[v]; !ok {
			s.heldSince[v] = now
		}
	}
	for v := range s.heldSince {
		if !on[v] {
			delete(s.heldSince, v)
			delete(s.tried, v)
		}
	}
}

// notify records keepalived's word on an instance. A repeated state keeps
// its first time. Only the states are recorded: keepalived also writes
// events in the same form (MASTER_RX_LOWER_PRI, when a master hears a
// lower priority, which happens in every split brain), and the instance
// stays in the state it was.
func (s *strays) notify(now time.Time, n keepalived.Notification) {
	switch n.State {
	case keepalived.StateNameMaster, keepalived.StateNameBackup, keepalived.StateNameFault, keepalived.StateNameStop:
	default:
		return
	}
	if cur, ok := s.states[n.Instance]; ok && cur.state == n.State {
		return
	}
	s.states[n.Instance] = instanceState{state: n.State, since: now}
	s.nextKnown = false
}

// forget drops every instance's state: keepalived restarted (or stopped),
// and what the old one said no longer holds.
func (s *strays) forget() {
	clear(s.states)
	s.nextKnown = false
}

// state returns the known state of vip's instance.
func (s *strays) state(vip netip.Addr) (instanceState, bool) {
	st, ok := s.states[s.instance[vip]]
	return st, ok
}

// strayAt returns when vip becomes a stray, or false when it is not
// heading to be one: not held, its instance unknown or MASTER.
func (s *strays) strayAt(vip netip.Addr) (time.Time, bool) {
	since, held := s.heldSince[vip]
	st, known := s.state(vip)
	if !held || !known || st.state == keepalived.StateNameMaster {
		return time.Time{}, false
	}
	from := since
	if st.since.After(from) {
		from = st.since
	}
	if t, ok := s.tried[vip]; ok && t.After(from) {
		from = t
	}
	return from.Add(s.grace), true
}

// due returns the VIPs that are strays at now.
func (s *strays) due(now time.Time) []netip.Addr {
	var out []netip.Addr
	for v := range s.heldSince {
		if at, ok := s.strayAt(v); ok && !at.After(now) {
			out = append(out, v)
		}
	}
	return out
}

// failed records a removal that did not work, so that it is tried again a
// grace period later rather than at once.
func (s *strays) failed(now time.Time, vip netip.Addr) {
	s.tried[vip] = now
	s.nextKnown = false
}

// next returns when the next VIP becomes a stray, or false when none is
// heading to be one.
func (s *strays) next() (time.Time, bool) {
	if !s.nextKnown {
		s.nextAt, s.nextOK, s.nextKnown = time.Time{}, false, true
		for v := range s.heldSince {
			if at, ok := s.strayAt(v); ok && (!s.nextOK || at.Before(s.nextAt)) {
				s.nextAt, s.nextOK = at, true
			}
		}
	}
	return s.nextAt, s.nextOK
}
