package splitbrain

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"time"
)

// contests decides when this node announces a VIP it holds again: once
// another host that claimed the VIP has stopped answering for it. It is a
// state machine on explicit times, like duplicates: the guard's loop feeds
// it the held VIPs and the claims, sends the probes and announcements it
// asks for.
//
// A client reaches a VIP through its ARP or neighbour entry, which points
// at whichever host announced or answered for the VIP last. When two hosts
// held it (a VRRP partition, a node that froze and resumed, a stray VIP),
// the one that lets it go says nothing; keepalived, on the node that keeps
// it, re-announces only when it hears a lower priority's advert, which a
// partition healing in one direction first never delivers. So clients that
// followed the other host keep sending to a node that no longer has the
// VIP. This node sees the contest: another host's gratuitous ARP or
// advertisement, its answer to a probe, or its probe (the guard that
// removes a stray VIP probes for it right after, to say so). From then on
// it asks that host, every round, whether it still has the VIP: an ARP
// probe or duplicate address detection solicitation sent to its MAC alone,
// which it answers while it has the VIP. The first round without an answer
// ends the contest, and this node announces the VIP (a gratuitous ARP, an
// unsolicited neighbour advertisement), so every client points at it again.
// So does a round in which one host stopped answering while another goes
// on: the clients of the one that let go have nowhere else to go.
//
// A contest costs one unicast probe per round to each other host, and ends
// in one announcement; announcements of a VIP are at least spacing apart.
// Rounds stretch with the number of contests, to gap per contest, so a node
// sends about one contest probe per gap whatever happens on the network: a
// fleet in turmoil (hundreds of VIPs held twice while every keepalived is
// late) costs a guard no more than a few contests do, and its clients come
// back later, not never.
// The end of a normal handover is a contest too, when the old master still
// answered the new one's first probe: one announcement more, harmless.
type contests struct {
	// round is how long another host has to answer a probe: the longest
	// a client waits after the other host let go is two rounds.
	round time.Duration
	// gap is the round's length per contest going on, when that is
	// longer than round.
	gap time.Duration
	// spacing is the shortest time between two announcements of a VIP.
	spacing time.Duration

	// held are the VIPs on the interface at the last listing: a claim on
	// another (read before this node let it go) starts nothing at once.
	held map[netip.Addr]bool
	// early is the last claim on each VIP not held, kept for a round: a
	// host that took the VIP at the same moment as this node (two backups
	// of close priorities whose master-down timers fired together) sends
	// its gratuitous ARP as it takes it, often before this node's listing
	// shows the VIP, and then yields without a word when it hears this
	// node's advert, which on a one-way partition this node never learns.
	// Its clients follow it there and stay, until keepalived's next
	// announcement (garp_master_delay, 5 s). A VIP that arrives within a
	// round of such a claim starts a contest with that host.
	early map[netip.Addr]earlyClaim
	vips  map[netip.Addr]*contest
	// announced is when each held VIP was last announced; pending are
	// announcements held back by spacing.
	announced map[netip.Addr]time.Time
	pending   map[netip.Addr]time.Time
	// again are the VIPs this node's keepalived took, and when each is
	// announced once more (see taken).
	again map[netip.Addr]time.Time
}

// earlyClaim is a claim on a VIP this node did not hold when it was read.
type earlyClaim struct {
	at  time.Time
	mac net.HardwareAddr
}

// contest is one VIP's: the hosts asked at the start of the round and those
// that claimed the VIP during it. A nil MAC is a host known only to exist
// (a duplicate address detection probe carries no link-layer address): it
// is asked by a probe to every host.
type contest struct {
	since    time.Time
	end      time.Time
	asked    []net.HardwareAddr
	answered []net.HardwareAddr
}

// probeTo is one probe to send: for vip, to mac (nil: to every host).
type probeTo struct {
	vip netip.Addr
	mac net.HardwareAddr
}

// contestEnd is a contest over, or a host out of it: the VIP to announce,
// the hosts that stopped answering for it, those that still do (none: the
// contest is over) and how long the contest has lasted.
type contestEnd struct {
	vip    netip.Addr
	macs   []net.HardwareAddr
	still  []net.HardwareAddr
	lasted time.Duration
}

func newContests(t timing) *contests {
	return &contests{round: t.contest, gap: t.contestGap, spacing: t.spacing,
		held: map[netip.Addr]bool{}, early: map[netip.Addr]earlyClaim{}, vips: map[netip.Addr]*contest{}, announced: map[netip.Addr]time.Time{}, pending: map[netip.Addr]time.Time{}, again: map[netip.Addr]time.Time{}}
}

// taken records that this node's keepalived said at now that it took
// vips: each is announced once more a round later. keepalived announces a
// VIP as it takes it, and the host that lets it go may still speak for it
// after that, in the moment before it hears the new master's advert and
// removes it: a neighbour solicitation from the VIP (to reach a client of
// a connection it was still serving) or an answer points that client back
// at it, and keepalived announces again only garp_master_delay (5 s)
// later. The old host then no longer has the VIP, so it neither answers
// this node's probes nor starts a contest: nothing else brings such a
// client back before its own neighbour entry fails. An IPv6 client stayed
// with the old holder 1.5 s after a replaced pod's node took its VIP back.
func (c *contests) taken(now time.Time, vips []netip.Addr) {
	for _, v := range vips {
		c.again[v] = now.Add(c.round)
	}
}

// setHeld records which VIPs this node holds at now: a VIP that left ends
// its contest without an announcement (the other host has it now, or
// nobody); one that arrived within a round of another host's claim on it
// starts a contest with that host, whose probe it returns.
func (c *contests) setHeld(now time.Time, held []netip.Addr) []probeTo {
	on := make(map[netip.Addr]bool, len(held))
	for _, v := range held {
		on[v] = true
	}
	before := c.held
	c.held = on
	var probes []probeTo
	for v, e := range c.early {
		if on[v] && !before[v] && now.Sub(e.at) <= c.round {
			probes = append(probes, c.claim(now, v, e.mac)...)
		}
		if on[v] || now.Sub(e.at) > c.round {
			delete(c.early, v)
		}
	}
	for _, m := range []map[netip.Addr]time.Time{c.announced, c.pending} {
		for v := range m {
			if !on[v] {
				delete(m, v)
			}
		}
	}
	for v := range c.vips {
		if !on[v] {
			delete(c.vips, v)
		}
	}
	return probes
}

// claim records that another host (mac, nil when unknown) claimed vip,
// which this node holds. The first claim starts a contest with a probe to
// that host at once: a host that only probed (a stray's remover) or that
// already let go does not answer, and the contest ends after one round.
func (c *contests) claim(now time.Time, vip netip.Addr, mac net.HardwareAddr) []probeTo {
	if !c.held[vip] {
		c.early[vip] = earlyClaim{at: now, mac: mac}
		return nil
	}
	ct, ok := c.vips[vip]
	if !ok {
		// The other host may have it again: the next announcement
		// waits for this contest's end.
		delete(c.pending, vip)
		c.vips[vip] = &contest{since: now, end: now.Add(c.roundLen(len(c.vips) + 1)), asked: []net.HardwareAddr{mac}}
		return []probeTo{{vip, mac}}
	}
	if !containsMAC(ct.answered, mac) {
		ct.answered = append(ct.answered, mac)
	}
	return nil
}

// roundLen is the length of a round while n contests go on.
func (c *contests) roundLen(n int) time.Duration {
	return max(c.round, time.Duration(n)*c.gap)
}

func containsMAC(ms []net.HardwareAddr, m net.HardwareAddr) bool {
	return slices.ContainsFunc(ms, func(x net.HardwareAddr) bool { return bytes.Equal(x, m) })
}

// due ends every round that is over at now: a contest that had an answer
// goes on with probes to the hosts that answered; one without ends, and
// its VIP is announced (now, or once spacing allows). A host asked that
// did not answer while others did is out of the contest, and the VIP is
// announced for its clients too. again are the VIPs taken a round ago
// (see taken), but for those a contest goes on for (its end announces
// them) or announced within the round.
func (c *contests) due(now time.Time) (probes []probeTo, ended []contestEnd, announce, again []netip.Addr) {
	round := c.roundLen(len(c.vips))
	for v, ct := range c.vips {
		if ct.end.After(now) {
			continue
		}
		if len(ct.answered) > 0 {
			// A host that let go while another still answers (a node
			// that yielded when a partition healed, beside a dead node's
			// kernel that answers for the VIP until it is removed) had
			// clients: they come back now, not when the last one lets go.
			var quit []net.HardwareAddr
			for _, m := range ct.asked {
				if m != nil && !containsMAC(ct.answered, m) {
					quit = append(quit, m)
				}
			}
			if len(quit) > 0 {
				ended = append(ended, contestEnd{vip: v, macs: quit, still: slices.Clone(ct.answered), lasted: now.Sub(ct.since)})
				c.pending[v] = now
			}
			ct.asked, ct.answered = ct.answered, nil
			ct.end = now.Add(round)
			for _, m := range ct.asked {
				probes = append(probes, probeTo{v, m})
			}
			continue
		}
		delete(c.vips, v)
		var macs []net.HardwareAddr
		for _, m := range ct.asked {
			if m != nil {
				macs = append(macs, m)
			}
		}
		ended = append(ended, contestEnd{vip: v, macs: macs, lasted: now.Sub(ct.since)})
		c.pending[v] = now
	}
	for v, at := range c.pending {
		if last, ok := c.announced[v]; ok && last.Add(c.spacing).After(at) {
			at = last.Add(c.spacing)
			c.pending[v] = at
		}
		if !at.After(now) {
			announce = append(announce, v)
			c.announced[v] = now
			delete(c.pending, v)
		}
	}
	for v, at := range c.again {
		if at.After(now) {
			continue
		}
		delete(c.again, v)
		if c.vips[v] != nil {
			continue
		}
		if last, ok := c.announced[v]; ok && now.Sub(last) < c.round {
			continue
		}
		again = append(again, v)
		if c.held[v] {
			c.announced[v] = now
		}
	}
	slices.SortFunc(again, netip.Addr.Compare)
	return probes, ended, announce, again
}

// next returns when the next round ends or the next held-back
// announcement is due, or false when nothing is.
func (c *contests) next() (time.Time, bool) {
	var at time.Time
	for _, ct := range c.vips {
		if at.IsZero() || ct.end.Before(at) {
			at = ct.end
		}
	}
	for v, p := range c.pending {
		if last, ok := c.announced[v]; ok && last.Add(c.spacing).After(p) {
			p = last.Add(c.spacing)
		}
		if at.IsZero() || p.Before(at) {
			at = p
		}
	}
	for _, p := range c.again {
		if at.IsZero() || p.Before(at) {
			at = p
		}
	}
	return at, !at.IsZero()
}
