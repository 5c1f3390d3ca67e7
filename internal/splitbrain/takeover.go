package splitbrain

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"time"
)

// Why this node's keepalived became MASTER of an instance, as the wire
// told it (Takeover.Cause).
const (
	// CauseStart: no other node's advert for the instance was heard since
	// this keepalived started: nobody held it.
	CauseStart = "start"
	// CauseHandover: the master's last advert had priority 0: it stopped
	// (a rollout, a deleted pod) or gave the instance up (its check
	// failed), and said so.
	CauseHandover = "handover"
	// CauseSilent: the master fell silent for the master-down interval: a
	// dead, frozen or cut-off node, or a VRRP path that broke.
	CauseSilent = "silent"
	// CausePreemption: the master was heard until the takeover, at a lower
	// priority: this node took the instance back (it starts as master of
	// the instances it prefers, or its preemption delay ended).
	CausePreemption = "preemption"
)

// Why this node's keepalived left MASTER of an instance (Release.Cause).
const (
	// ReleaseStop: keepalived stopped (the pod is stopping, or keepalived
	// is restarted): it sent priority 0.
	ReleaseStop = "stop"
	// ReleaseFault: the instance went to FAULT: the check failed, or the
	// interface went down.
	ReleaseFault = "fault"
	// ReleaseHigherPriority: another node's advert of a higher priority:
	// preemption by a node that prefers it, or the end of a split brain.
	ReleaseHigherPriority = "higher-priority"
)

// Takeover is an instance this node's keepalived became MASTER of.
type Takeover struct {
	Instance string
	VIPs     []netip.Addr
	// At is when keepalived said so (its notify FIFO line).
	At    time.Time
	Cause string
	// From is the source of the last advert of another node heard for the
	// instance before At, and LastAdvert when it arrived; both zero when
	// none was heard (CauseStart).
	From       netip.Addr
	LastAdvert time.Time
	// Announced is when this node first announced one of the VIPs after
	// At (a gratuitous ARP or an unsolicited neighbour advertisement);
	// zero when it was not seen.
	Announced time.Time
}

// Release is an instance this node's keepalived left MASTER of.
type Release struct {
	Instance string
	VIPs     []netip.Addr
	At       time.Time
	Cause    string
	// To is the source of the higher priority heard (ReleaseHigherPriority),
	// zero otherwise.
	To netip.Addr
}

// lastAdvert is the last advert another node sent for one of this
// deployment's instances, as the clock socket read it.
type lastAdvert struct {
	at       time.Time
	src      netip.Addr
	priority int
	interval time.Duration
}

// advertClock keeps, per instance, the last advert of another node: what
// a takeover's cause and time are read from. Its readers write, the loop
// reads; safe for concurrent use.
type advertClock struct {
	mu   sync.Mutex
	last map[key]heardAdverts
	// bye is, per instance, the last advert of priority 0 heard: a reader
	// that runs behind the loop may note it after keepalived's MASTER line
	// was read, and the takeover is told with it (takeovers.flush).
	bye map[key]lastAdvert
}

// heardAdverts are an instance's last advert, when its node's run of
// adverts began (since), and the last advert of the node heard before it.
type heardAdverts struct {
	last, prev lastAdvert
	since      time.Time
}

func newAdvertClock() *advertClock {
	return &advertClock{last: map[key]heardAdverts{}, bye: map[key]lastAdvert{}}
}

// heard notes an advert; b is as the raw socket delivers it.
func (c *advertClock) heard(b []byte, src netip.Addr, v6 bool, at time.Time) {
	if len(b) < 8 {
		return
	}
	version := int(b[0] >> 4)
	a := lastAdvert{at: at, src: src, priority: int(b[2])}
	switch version {
	case 2:
		a.interval = time.Duration(b[5]) * time.Second
	case 3:
		a.interval = time.Duration(binary.BigEndian.Uint16(b[4:6])&0x0fff) * 10 * time.Millisecond
	default:
		return
	}
	k := key{v6: v6, vrid: int(b[1])}
	c.mu.Lock()
	h, ok := c.last[k]
	if !ok || h.last.src != src {
		h.prev, h.since = h.last, at
	}
	h.last = a
	c.last[k] = h
	if a.priority == 0 {
		c.bye[k] = a
	}
	c.mu.Unlock()
}

// goodbye returns the last advert of priority 0 heard for k.
func (c *advertClock) goodbye(k key) (lastAdvert, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.bye[k]
	return a, ok
}

// get returns the last advert heard for k.
func (c *advertClock) get(k key) (lastAdvert, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.last[k]
	return h.last, ok
}

// master returns the last advert of the node that was master of k before
// this node took it: the last advert heard, unless its node began sending
// less than two of its intervals before, after another node's adverts.
// That node is a backup that became master at the same moment as this
// one (their priorities, and so their master-down intervals, are close):
// the master before both is the other node.
func (c *advertClock) master(k key) (lastAdvert, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.last[k]
	if ok && h.prev.src.IsValid() && h.last.at.Sub(h.since) < 2*h.last.interval {
		return h.prev, true
	}
	return h.last, ok
}

// announceWait is how long a takeover waits for this node's first
// announcement of its VIPs before it is told without one.
const announceWait = 2 * time.Second

// takeovers follows keepalived's transitions into and out of MASTER and
// tells them (Options.Took, Options.Released), a takeover once its
// announcement was seen or announceWait passed, and no sooner than
// clockSettle after keepalived's line. Owned by the guard's loop.
type takeovers struct {
	clock *advertClock
	// mu guards the instances, which Replan changes from another
	// goroutine.
	mu       sync.Mutex
	keys     map[string]key          // by instance
	vips     map[string][]netip.Addr // by instance
	priority map[string]int          // this node's, by instance
	// started is when the keepalived whose lines these are started (its
	// pid changed): adverts before it are not its takeover's.
	started time.Time
	state   map[string]string
	pending map[string]*Takeover
	// early is, per instance not pending, the first of this node's
	// announcements since keepalived's last line for it: keepalived
	// announces before it writes MASTER, and the loop may read the
	// announcement first.
	early   map[string]time.Time
	took    func(Takeover)
	release func(Release)
}

func newTakeovers(clock *advertClock, took func(Takeover), released func(Release)) *takeovers {
	return &takeovers{clock: clock, state: map[string]string{}, pending: map[string]*Takeover{}, early: map[string]time.Time{}, took: took, release: released}
}

// replan takes the instances of a plan; safe from any goroutine.
func (t *takeovers) replan(instances map[string]key, vips map[string][]netip.Addr, priority map[string]int) {
	t.mu.Lock()
	t.keys, t.vips, t.priority = instances, vips, priority
	t.mu.Unlock()
}

// instance is what the takeovers know of an instance.
func (t *takeovers) instance(name string) (k key, vips []netip.Addr, priority int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok = t.keys[name]
	return k, t.vips[name], t.priority[name], ok
}

// restart forgets what the keepalived before said: a new one starts now.
func (t *takeovers) restart(now time.Time) {
	t.started = now
	clear(t.state)
	clear(t.early)
	for name := range t.pending {
		t.flush(name)
	}
}

// note takes one of keepalived's state lines, at now.
func (t *takeovers) note(now time.Time, instance, state string) {
	k, vips, priority, ok := t.instance(instance)
	if !ok {
		return
	}
	was := t.state[instance]
	t.state[instance] = state
	early, announced := t.early[instance]
	delete(t.early, instance)
	switch {
	case state == "MASTER" && was != "MASTER":
		to := &Takeover{Instance: instance, VIPs: vips, At: now, Cause: CauseStart}
		if a, ok := t.clock.master(k); ok && !a.at.Before(t.started) {
			to.From, to.LastAdvert = a.src, a.at
			switch {
			case a.priority == 0:
				to.Cause = CauseHandover
			case now.Sub(a.at) >= 3*a.interval-a.interval/2:
				// Silent for (nearly) the master-down interval: dead.
				to.Cause = CauseSilent
			default:
				to.Cause = CausePreemption
			}
		}
		t.pending[instance] = to
		if announced && !early.Before(now.Add(-earlyWindow)) {
			to.Announced = early
		}
	case was == "MASTER" && state != "MASTER":
		t.flush(instance)
		r := Release{Instance: instance, VIPs: vips, At: now, Cause: ReleaseStop}
		switch state {
		case "FAULT":
			r.Cause = ReleaseFault
		case "BACKUP":
			r.Cause = ReleaseHigherPriority
			if a, ok := t.clock.get(k); ok && a.priority > priority {
				r.To = a.src
			}
		}
		if t.release != nil {
			t.release(r)
		}
	}
}

// announced takes this node's announcement of one of instance's VIPs at
// at: the end of a pending takeover, or kept for the MASTER line to come.
func (t *takeovers) announced(instance string, at time.Time) {
	if p, ok := t.pending[instance]; ok {
		if p.Announced.IsZero() && !at.Before(p.At.Add(-announceLead)) {
			p.Announced = at
		}
		return
	}
	if _, ok := t.early[instance]; !ok && t.state[instance] != "MASTER" {
		t.early[instance] = at
	}
}

// earlyWindow is how long before keepalived's MASTER line, as the loop
// reads it, an announcement read first still counts as the takeover's:
// the line's way through the notify FIFO and the loop's queue.
const earlyWindow = 500 * time.Millisecond

// announceLead is how much earlier than keepalived's MASTER line its first
// announcement may be seen: it announces as it takes the VIPs, and writes
// the line after.
const announceLead = 50 * time.Millisecond

// clockSettle is how long after keepalived's MASTER line, as the loop
// reads it, a takeover waits before it is told: the clock's readers are
// goroutines of their own, and on a loaded node they may note an advert
// that arrived before the line (the old master's goodbye) tens of
// milliseconds after the loop read the line.
const clockSettle = 100 * time.Millisecond

// flush tells a pending takeover. A goodbye of the master taken from that
// arrived after the advert the takeover was judged by, and before
// keepalived's line, makes it a handover: its reader ran behind.
func (t *takeovers) flush(instance string) {
	p, ok := t.pending[instance]
	if !ok {
		return
	}
	delete(t.pending, instance)
	if k, _, _, ok := t.instance(instance); ok && p.Cause != CauseHandover {
		if b, ok := t.clock.goodbye(k); ok && !b.at.After(p.At) && b.at.After(p.LastAdvert) && !b.at.Before(t.started) &&
			(!p.From.IsValid() || b.src == p.From) {
			p.Cause, p.From, p.LastAdvert = CauseHandover, b.src, b.at
		}
	}
	if t.took != nil {
		t.took(*p)
	}
}

// dueAt is when a pending takeover is told: clockSettle after its line
// once announced, else when its announcement is given up on.
func dueAt(p *Takeover) time.Time {
	if !p.Announced.IsZero() {
		return p.At.Add(clockSettle)
	}
	return p.At.Add(announceWait)
}

// due tells the takeovers that are due (dueAt).
func (t *takeovers) due(now time.Time) {
	for name, p := range t.pending {
		if !now.Before(dueAt(p)) {
			t.flush(name)
		}
	}
}

// next is when the first pending takeover is due.
func (t *takeovers) next() (time.Time, bool) {
	var at time.Time
	for _, p := range t.pending {
		if d := dueAt(p); at.IsZero() || d.Before(at) {
			at = d
		}
	}
	return at, !at.IsZero()
}
