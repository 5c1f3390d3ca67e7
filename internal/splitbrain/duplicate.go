package splitbrain

import (
	"bytes"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"time"
)

// duplicates tracks, for every VIP this node holds, whether another host
// answers for it too. It is a state machine on explicit times: the guard's
// loop feeds it the held VIPs and the claims other hosts make, sends the
// probes it asks for and logs the conflicts it reports.
//
// Each held VIP is probed in rounds: a probe (ARP or neighbour
// solicitation) at the start of a round, and every claim on the VIP by
// another MAC during the round (an answer to the probe, a gratuitous ARP or
// unsolicited advertisement, another host's probe) counts for it. A round
// whose outcome (answered or not) differs from the VIP's state is followed
// by a short confirming round; only when that one agrees does the state
// flip. So a conflict starts after two answered rounds and ends after two
// silent ones: the moment of a normal handover, when the old master still
// answers for a few milliseconds after the new one took the VIP, is not a
// conflict. A VIP that becomes held is probed at once and starts with a
// two-second round, and a VIP in conflict keeps to one-second rounds, so
// that the end shows soon after the other host lets go.
type duplicates struct {
	// interval is the length of a round when nothing changes, stretched
	// so that the node sends one probe per gap on average at most (at
	// 150 VIPs and a 100 ms gap, a round lasts 15 s): the cost stays the
	// same whatever the number of VIPs. A conflict usually starts with the
	// other host announcing the VIP, which ends the round early, so the
	// stretch slows only the detection of hosts that take a VIP silently.
	interval, gap time.Duration
	// spread is the part of a regular round added per VIP (from a hash of
	// the address), so that the probes of VIPs taken together drift
	// apart.
	spread float64
	// confirm is the length of a confirming round, and of a round while
	// a conflict lasts; a first round is twice as long.
	confirm time.Duration
	// grid, when set, moves the end of every regular round up to the
	// next multiple of it: the rounds that end within one grid step end
	// together, in one wake-up of the guard's loop with a burst of probes,
	// rather than one wake-up per probe. First, confirming and conflict
	// rounds keep their exact lengths, so detection is not slowed.
	grid time.Duration

	vips map[netip.Addr]*probeState
	// nextEnd caches next's answer until a round changes.
	nextEnd   time.Time
	nextKnown bool
}

type probeState struct {
	end        time.Time
	confirming bool
	// answered are the other MACs that claimed the VIP this round.
	answered []net.HardwareAddr
	// conflict are the other MACs of the conflict in progress; empty when
	// there is none.
	conflict []net.HardwareAddr
	since    time.Time
	// hash places the VIP in the spread.
	hash uint32
}

// conflictChange is the start or end of a conflict.
type conflictChange struct {
	vip     netip.Addr
	started bool
	// released is set when the conflict ended because this node no longer
	// holds the VIP.
	released bool
	macs     []net.HardwareAddr
	lasted   time.Duration
}

func newDuplicates(t timing) *duplicates {
	return &duplicates{interval: t.probe, gap: t.gap, spread: t.spread, confirm: t.confirm, grid: t.grid, vips: map[netip.Addr]*probeState{}}
}

// first is the length of a VIP's first round and of a round a claim cut
// short: two confirming rounds, so that, with the confirming round after
// it, a conflict needs the other host to answer for about three seconds.
// No normal handover keeps a VIP on two nodes that long (the old master
// lets go at the new one's first advert), but a node that starts 254
// instances at once may, for a second or so.
func (d *duplicates) first() time.Duration { return 2 * d.confirm }

// regular is the length of a regular round of st: the interval, stretched
// to the number of VIPs held, plus the VIP's share of the spread.
func (d *duplicates) regular(st *probeState) time.Duration {
	base := max(d.interval, time.Duration(len(d.vips))*d.gap)
	return base + time.Duration(float64(base)*d.spread*float64(st.hash)/(1<<32))
}

// setHeld records which VIPs this node holds. It returns the VIPs to probe
// now (the newly held ones) and the conflicts that ended because the VIP
// left this node.
func (d *duplicates) setHeld(now time.Time, held []netip.Addr) (probe []netip.Addr, ended []conflictChange) {
	d.nextKnown = false
	on := make(map[netip.Addr]bool, len(held))
	for _, v := range held {
		on[v] = true
		if _, ok := d.vips[v]; ok {
			continue
		}
		d.vips[v] = &probeState{end: now.Add(d.first()), hash: hashAddr(v)}
		probe = append(probe, v)
	}
	for v, st := range d.vips {
		if on[v] {
			continue
		}
		if len(st.conflict) > 0 {
			ended = append(ended, conflictChange{vip: v, released: true, macs: st.conflict, lasted: now.Sub(st.since)})
		}
		delete(d.vips, v)
	}
	return probe, ended
}

func hashAddr(v netip.Addr) uint32 {
	h := fnv.New32a()
	b := v.As16()
	h.Write(b[:])
	return h.Sum32()
}

// claim records that another host, mac, says it has vip. It reports
// whether vip is held here (and the claim therefore counts). The first
// claim on a VIP without a conflict cuts a long round short, so that a
// conflict that starts between two probes (the other host's gratuitous ARP
// as it takes the VIP) is confirmed as fast as one found by a probe.
func (d *duplicates) claim(now time.Time, vip netip.Addr, mac net.HardwareAddr) bool {
	st, ok := d.vips[vip]
	if !ok {
		return false
	}
	if len(st.answered) == 0 && len(st.conflict) == 0 && !st.confirming {
		if end := now.Add(d.first()); end.Before(st.end) {
			st.end = end
			d.nextKnown = false
		}
	}
	if !slices.ContainsFunc(st.answered, func(m net.HardwareAddr) bool { return bytes.Equal(m, mac) }) {
		st.answered = append(st.answered, mac)
	}
	return true
}

// due ends every round that is over at now, or within early of it, and
// starts the next from the round's due time (now plus early, so that a
// round ended early keeps its length): it returns the VIPs to probe and
// the conflicts that started or ended. A conflict starts, and lasts, by
// now: a release read at once after it lasted no time, not less.
func (d *duplicates) due(now time.Time, early time.Duration) (probe []netip.Addr, changes []conflictChange) {
	d.nextKnown = false
	horizon := now.Add(early)
	for v, st := range d.vips {
		if st.end.After(horizon) {
			continue
		}
		answered := len(st.answered) > 0
		inConflict := len(st.conflict) > 0
		length, regular := d.regular(st), true
		switch {
		case answered == inConflict:
			st.confirming = false
			if answered {
				st.conflict = sortedMACs(st.answered)
			}
		case !st.confirming:
			st.confirming = true
			length, regular = d.confirm, false
		case answered:
			st.confirming = false
			st.conflict, st.since = sortedMACs(st.answered), now
			changes = append(changes, conflictChange{vip: v, started: true, macs: st.conflict})
		default:
			st.confirming = false
			changes = append(changes, conflictChange{vip: v, macs: st.conflict, lasted: now.Sub(st.since)})
			st.conflict = nil
		}
		if len(st.conflict) > 0 {
			// A conflict is watched closely, so that its end shows
			// soon after the other host lets go; conflicts are rare,
			// the extra probes cheap.
			length, regular = min(length, d.confirm), false
		}
		st.answered = nil
		st.end = horizon.Add(length)
		if regular && d.grid > 0 {
			if t := st.end.Truncate(d.grid); t.Before(st.end) {
				st.end = t.Add(d.grid)
			}
		}
		probe = append(probe, v)
	}
	return probe, changes
}

// next returns when the next round ends, or false when no VIP is held.
func (d *duplicates) next() (time.Time, bool) {
	if !d.nextKnown {
		d.nextEnd, d.nextKnown = time.Time{}, true
		for _, st := range d.vips {
			if d.nextEnd.IsZero() || st.end.Before(d.nextEnd) {
				d.nextEnd = st.end
			}
		}
	}
	return d.nextEnd, !d.nextEnd.IsZero()
}

// conflicts returns the VIPs in conflict with the other MACs.
func (d *duplicates) conflicts() map[netip.Addr][]net.HardwareAddr {
	out := map[netip.Addr][]net.HardwareAddr{}
	for v, st := range d.vips {
		if len(st.conflict) > 0 {
			out[v] = slices.Clone(st.conflict)
		}
	}
	return out
}

func sortedMACs(ms []net.HardwareAddr) []net.HardwareAddr {
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b net.HardwareAddr) int { return bytes.Compare(a, b) })
	return out
}
