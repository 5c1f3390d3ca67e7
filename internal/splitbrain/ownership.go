package splitbrain

import (
	"net/netip"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// ownership compares the VIPs on the interface with what keepalived says of
// their instances, and finds the two ways they disagree:
//
//   - a stray: a VIP on the interface while its instance is known to be in
//     another state than MASTER, for the grace period;
//   - a missing VIP: one that is not on the interface while its instance is
//     known to be MASTER, for the mend period. keepalived adds an
//     instance's VIPs once, as it becomes MASTER, and never again while it
//     stays MASTER: an add that did not take leaves the node announcing a
//     VIP it does not hold, a black hole for every client that listens,
//     until the instance changes state.
//
// It is a state machine on explicit times: the guard's loop feeds it the
// held VIPs and keepalived's notifications and asks it what is due.
//
// An instance's state is known from keepalived's notify FIFO, which
// keepalived writes right after it adds the VIPs of an instance becoming
// MASTER and right after it removes them on leaving MASTER; a started
// keepalived announces every instance. The periods therefore only have to
// cover the moment between the address change and the line, and the loop's
// own delays: the grace period is two advert intervals, at least a second;
// the mend period half a second whatever the interval (a missing VIP is an
// outage, a stray is not, and the race it covers is keepalived's own, not
// VRRP's timers). Until keepalived has announced an
// instance (after a start or restart), its VIPs are left alone: nothing is
// removed or added on a guess.
//
// keepalived does not remove on leaving MASTER what it did not add itself,
// so a VIP the guard put back is a stray as soon as its instance leaves
// MASTER, without a grace period.
type ownership struct {
	grace, mend time.Duration
	// instance names each VIP's vrrp_instance.
	instance map[netip.Addr]string

	// listed says whether the addresses have been listed once: before
	// that no VIP is known to be missing.
	listed      bool
	heldSince   map[netip.Addr]time.Time
	absentSince map[netip.Addr]time.Time
	states      map[string]instanceState
	// mended are the VIPs the guard put back, until they are gone or
	// their instance becomes MASTER again (keepalived then owns them).
	mended map[netip.Addr]bool
	// stopping is set while keepalived is being stopped, until forget:
	// every instance it announced counts as stopped, whatever it wrote
	// last or writes now.
	stopping bool
	// tried holds, per VIP, when its removal or addition last failed: it
	// is tried again one period later.
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

func newOwnership(grace, mend time.Duration, instance map[netip.Addr]string) *ownership {
	return &ownership{
		grace:       grace,
		mend:        mend,
		instance:    instance,
		heldSince:   map[netip.Addr]time.Time{},
		absentSince: map[netip.Addr]time.Time{},
		states:      map[string]instanceState{},
		mended:      map[netip.Addr]bool{},
		tried:       map[netip.Addr]time.Time{},
	}
}

// setHeld records which VIPs are on the interface now.
func (s *ownership) setHeld(now time.Time, held []netip.Addr) {
	s.nextKnown = false
	s.listed = true
	on := make(map[netip.Addr]bool, len(held))
	for _, v := range held {
		on[v] = true
	}
	for v := range s.instance {
		if on[v] {
			if _, ok := s.heldSince[v]; !ok {
				s.heldSince[v] = now
				delete(s.tried, v)
			}
			delete(s.absentSince, v)
			continue
		}
		if _, ok := s.absentSince[v]; !ok {
			s.absentSince[v] = now
			delete(s.tried, v)
		}
		delete(s.heldSince, v)
		delete(s.mended, v)
	}
}

// notify records keepalived's word on an instance. A repeated state keeps
// its first time. Only the states are recorded: keepalived also writes
// events in the same form (MASTER_RX_LOWER_PRI, when a master hears a
// lower priority, which happens in every split brain), and the instance
// stays in the state it was.
func (s *ownership) notify(now time.Time, n keepalived.Notification) {
	if s.stopping {
		return
	}
	switch n.State {
	case keepalived.StateNameMaster, keepalived.StateNameBackup, keepalived.StateNameFault, keepalived.StateNameStop:
	default:
		return
	}
	if cur, ok := s.states[n.Instance]; ok && cur.state == n.State {
		return
	}
	s.states[n.Instance] = instanceState{state: n.State, since: now}
	if n.State == keepalived.StateNameMaster {
		// keepalived adds them again (an address already there counts as
		// added) and removes them when it leaves MASTER.
		for v, name := range s.instance {
			if name == n.Instance {
				delete(s.mended, v)
			}
		}
	}
	s.nextKnown = false
}

// forget drops every instance's state: keepalived restarted (or stopped),
// and what the old one said no longer holds.
func (s *ownership) forget() {
	clear(s.states)
	s.stopping = false
	s.nextKnown = false
}

// stopAll records that keepalived is being stopped: every instance it
// announced leaves MASTER now. A stopping keepalived removes the VIPs it
// added at once but writes its STOP lines only as it exits, after its
// priority-0 adverts (about a second later in a lab run): until then the
// VIPs it removed must not count as missing, and a VIP the guard put
// back, which keepalived does not remove, is a stray at once. Lines it
// still writes change nothing until forget.
func (s *ownership) stopAll(now time.Time) {
	if s.stopping {
		return
	}
	s.stopping = true
	for name, st := range s.states {
		if st.state != keepalived.StateNameStop {
			s.states[name] = instanceState{state: keepalived.StateNameStop, since: now}
		}
	}
	s.nextKnown = false
}

// state returns the known state of vip's instance.
func (s *ownership) state(vip netip.Addr) (instanceState, bool) {
	st, ok := s.states[s.instance[vip]]
	return st, ok
}

// strayAt returns when vip becomes a stray, or false when it is not
// heading to be one: not held, its instance unknown or MASTER.
func (s *ownership) strayAt(vip netip.Addr) (time.Time, bool) {
	since, held := s.heldSince[vip]
	st, known := s.state(vip)
	if !held || !known || st.state == keepalived.StateNameMaster {
		return time.Time{}, false
	}
	from := s.latest(vip, since, st)
	if s.mended[vip] && from.Equal(st.since) {
		return from, true
	}
	return from.Add(s.grace), true
}

// missingAt returns when vip is missing, or false when it is not heading
// to be: held, or its instance unknown or not MASTER.
func (s *ownership) missingAt(vip netip.Addr) (time.Time, bool) {
	since, absent := s.absentSince[vip]
	st, known := s.state(vip)
	if !s.listed || !absent || !known || st.state != keepalived.StateNameMaster {
		return time.Time{}, false
	}
	return s.latest(vip, since, st).Add(s.mend), true
}

// latest is the latest of since (when vip came or went), its instance's
// last state change and its last failed removal or addition: the period
// runs from there.
func (s *ownership) latest(vip netip.Addr, since time.Time, st instanceState) time.Time {
	from := since
	if st.since.After(from) {
		from = st.since
	}
	if t, ok := s.tried[vip]; ok && t.After(from) {
		from = t
	}
	return from
}

// due returns the VIPs that are strays at now, to remove, and the ones
// that are missing, to add.
func (s *ownership) due(now time.Time) (strays, missing []netip.Addr) {
	for v := range s.instance {
		if at, ok := s.strayAt(v); ok && !at.After(now) {
			strays = append(strays, v)
		}
		if at, ok := s.missingAt(v); ok && !at.After(now) {
			missing = append(missing, v)
		}
	}
	return strays, missing
}

// failed records a removal or an addition that did not work, so that it is
// tried again a period later rather than at once.
func (s *ownership) failed(now time.Time, vip netip.Addr) {
	s.tried[vip] = now
	s.nextKnown = false
}

// putBack says whether vip is on the interface because the guard put it
// back.
func (s *ownership) putBack(vip netip.Addr) bool { return s.mended[vip] }

// put records a VIP the guard added.
func (s *ownership) put(vip netip.Addr) {
	s.mended[vip] = true
	s.nextKnown = false
}

// next returns when the next VIP becomes a stray or missing, or false when
// none is heading to be one.
func (s *ownership) next() (time.Time, bool) {
	if !s.nextKnown {
		s.nextAt, s.nextOK, s.nextKnown = time.Time{}, false, true
		for v := range s.instance {
			for _, f := range []func(netip.Addr) (time.Time, bool){s.strayAt, s.missingAt} {
				if at, ok := f(v); ok && (!s.nextOK || at.Before(s.nextAt)) {
					s.nextAt, s.nextOK = at, true
				}
			}
		}
	}
	return s.nextAt, s.nextOK
}
