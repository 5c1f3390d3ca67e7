// Package splitbrain watches for the ways a VRRP domain comes apart, and
// heals the one a node can heal on its own:
//
//   - Duplicate VIPs. For every VIP this node holds, it asks the network
//     whether another host answers for it too: an RFC 5227 ARP probe for
//     IPv4, a duplicate address detection neighbour solicitation for IPv6,
//     right after the VIP arrives and every few seconds after, and it
//     listens to what other hosts announce. Two answered rounds start a
//     conflict, two silent ones end it.
//   - Stray VIPs. A VIP of this configuration on the interface while
//     keepalived's instance for it is not MASTER, for two advert intervals
//     (at least a second), is removed. keepalived's notify FIFO says, at once
//     and in order, which instances are MASTER.
//   - Foreign speakers. Every VRRP advert the node accepts on the interface
//     for one of this deployment's router ids is compared with what every
//     member of the deployment sends (the same version, authentication and
//     VIP set, and with unicast a configured peer as the source); one that
//     differs comes from another VRRP deployment.
//
// And it heals what a split brain leaves in the clients: when another host
// that claimed a VIP this node holds stops answering for it, the node
// announces the VIP again (a gratuitous ARP, an unsolicited neighbour
// advertisement), so that clients that followed the other host come back
// (see contests).
//
// The sockets sit behind a small interface; the probe and stray logic are
// state machines on explicit times, tested without the kernel.
package splitbrain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"

	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// Host is the node's network state that the guard reads and changes;
// host.Netlink is one.
type Host interface {
	// Interface looks an interface up (its index and MAC).
	Interface(name string) (net.Interface, error)
	// List returns the addresses on iface.
	List(iface string) ([]netip.Prefix, error)
	// Add and Delete change them: the guard deletes a stray (through
	// host.ReleaseVIPs, which puts back an address a deletion took
	// along) and adds a VIP missing from a MASTER.
	Add(iface string, p netip.Prefix) error
	Delete(iface string, p netip.Prefix) error
	// WatchAddrs sends a value on changed (without blocking) when the
	// addresses on iface may have changed, until ctx ends.
	WatchAddrs(ctx context.Context, iface string, changed chan<- struct{}) error
}

// Keepalived is the supervised keepalived.
type Keepalived interface {
	// PID is keepalived's process id, 0 while none runs.
	PID() int
	// Stopping says whether ipfailover is stopping keepalived, or has
	// stopped it: keepalived then removes its VIPs at once, and writes
	// its STOP lines only as it exits.
	Stopping() bool
}

// Options configure a Guard.
type Options struct {
	// Plan gives the interface, the VIPs and their instances, and what
	// this deployment's adverts look like.
	Plan       *plan.Plan
	Host       Host
	Keepalived Keepalived
	Logger     *slog.Logger
	// Notified, when set, gets every line of keepalived's notify FIFO about
	// an instance, in order, as the guard reads it (there is one reader).
	Notified func(keepalived.Notification)
	// Heard, when set, gets every advert (priority 1..254, with this
	// deployment's VIPs and password) that one of the workload's pods
	// sent for one of this deployment's router ids and keepalived does
	// not hear: in the other VRRP version, or from a pod it does not list
	// (plan.Fleet). What the wire says overrides what the API server
	// says: such a pod's adverts mean two masters. It is called from
	// the guard's readers and must not block.
	Heard func(src netip.Addr, version int, interval time.Duration)
	// Took and Released, when set, get every instance this node's
	// keepalived became MASTER of, or left MASTER of, with what the wire
	// said of why. They are called from the guard's loop and must not
	// block.
	Took     func(Takeover)
	Released func(Release)
	// Duplicated, when set, gets the start and the end of every
	// duplicate VIP (another host answering for a VIP this node holds),
	// from the guard's loop; it must not block.
	Duplicated func(Duplicate)
}

// Duplicate is the start or the end of another host answering for a VIP
// this node holds.
type Duplicate struct {
	VIP      netip.Addr
	Instance string
	// Others are the other hosts' Ethernet addresses.
	Others []net.HardwareAddr
	// Started is set at the start; at the end, Released says this node
	// released the VIP (rather than the other host), and Lasted how long
	// it lasted.
	Started, Released bool
	Lasted            time.Duration
}

// probeBatch is how early a probe round may end, so that rounds close
// together end in one wake-up of the loop.
const probeBatch = 100 * time.Millisecond

// timing holds the guard's periods.
type timing struct {
	// probe is the round length of a VIP whose state holds, stretched to
	// one probe per gap at most; spread is the part of it added per VIP;
	// confirm is the length of a first and of a confirming round.
	probe, gap, confirm time.Duration
	spread              float64
	// grid aligns the ends of regular rounds (see duplicates.grid).
	grid time.Duration
	// grace is how long a VIP may sit on the interface while its instance
	// is not MASTER; mend, how long it may be missing from it while its
	// instance is MASTER.
	grace, mend time.Duration
	// relist is how often the addresses are listed even when the kernel
	// reports no change.
	relist time.Duration
	// contest is the round of a contest over a VIP, contestGap its
	// length per contest going on when that is longer, spacing the
	// shortest time between two announcements of a VIP (see contests).
	contest, contestGap, spacing time.Duration
	// relistGap is the shortest time between two listings of the
	// addresses on the kernel's word that they changed: a burst of
	// changes (keepalived adding a hundred VIPs) is one listing.
	relistGap time.Duration
}

func defaultTiming(advert time.Duration) timing {
	return timing{
		probe:      2 * time.Second,
		gap:        100 * time.Millisecond,
		spread:     0.25,
		grid:       time.Second,
		confirm:    time.Second,
		grace:      max(2*advert, time.Second),
		mend:       500 * time.Millisecond,
		relist:     10 * time.Second,
		contest:    200 * time.Millisecond,
		contestGap: 10 * time.Millisecond,
		spacing:    time.Second,
		relistGap:  50 * time.Millisecond,
	}
}

// Guard runs the three detectors on one interface.
type Guard struct {
	iface      string
	mac        net.HardwareAddr
	isVIP      map[netip.Addr]bool
	instance   map[netip.Addr]string
	notified   func(keepalived.Notification)
	heard      func(netip.Addr, int, time.Duration)
	host       Host
	keepalived Keepalived
	notify     io.ReadCloser
	socks      sockets
	closeOnce  sync.Once
	probes     map[netip.Addr]probeFrame
	// announcements are the IPv4 VIPs' gratuitous ARPs, built once (an
	// IPv6 one depends on whether the node forwards at that moment).
	announcements map[netip.Addr][]byte
	// sysctl is where the kernel's settings are read ("/proc/sys"; empty:
	// nowhere, the node does not forward).
	sysctl string
	timing timing
	log    *slog.Logger

	claims chan claim
	notes  chan keepalived.Notification
	// announces are this node's announcements (announceProgram), by
	// instance, for the takeovers.
	announces chan announcement

	// clock is the takeovers' last adverts, which its readers write.
	clock *advertClock

	// Owned by Run's loop.
	takeovers *takeovers
	// duplicated gets the duplicate VIPs' starts and ends (Options).
	duplicated func(Duplicate)
	dup        *duplicates
	ownership  *ownership
	contest    *contests
	pid        int
	listErr    bool
	sendErr    bool
	beatErr    bool
	// listed is when the addresses were last listed; relistAt, when set,
	// is when a change the kernel reported since is listed.
	listed, relistAt time.Time

	// own are the interface's addresses that are not VIPs, for the
	// advert readers to skip this node's own adverts.
	ownMu sync.RWMutex
	own   map[netip.Addr]bool
	// linkLocal is the interface's IPv6 link-local address at the last
	// listing (invalid: none), the source of the IPv6 probes of held VIPs.
	linkLocal netip.Addr

	foreign *foreign
	// beats are the heartbeats of the peers that send them; sendTo are
	// keepalived's unicast peers, which get this node's, sent from src
	// (by family). Replan changes them.
	beats  *heartbeats
	sendMu sync.Mutex
	sendTo []netip.Addr
	src    map[bool]netip.Addr
	// expect is what members' adverts look like; Replan changes it.
	// departed are the unicast peers a Replan dropped, and when: a
	// renumbered node's last adverts from its old address, sent before
	// its keepalived reloaded, still arrive after this node dropped that
	// address (on the cluster, a handful within 2 ms). Within
	// departedGrace they are a member's.
	expectMu      sync.RWMutex
	expect        map[key]expectation
	departed      map[netip.Addr]time.Time
	departedGrace time.Duration

	mu           sync.Mutex
	lastDropLog  time.Time
	conflicts    map[netip.Addr][]net.HardwareAddr
	strayRemoved map[netip.Addr]uint64
	restored     map[netip.Addr]uint64
	announced    map[netip.Addr]uint64
}

// probeFrame is a VIP's probe, built once.
type probeFrame struct {
	frame []byte
	to    net.HardwareAddr
	v6    bool
}

// Open sets the guard up before keepalived starts: it opens keepalived's
// notify FIFO (so that no line is lost) and the sockets. What cannot be
// opened is logged, and that detector stays off; failover itself never
// depends on the guard.
func Open(o Options) (*Guard, error) {
	if o.Plan == nil || o.Host == nil || o.Keepalived == nil {
		return nil, errors.New("splitbrain: Options.Plan, Host and Keepalived are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	iface := o.Plan.Node.Interface
	ifi, err := o.Host.Interface(iface)
	if err != nil {
		return nil, fmt.Errorf("splitbrain: %w", err)
	}
	var notify io.ReadCloser
	if f, err := keepalived.OpenNotifyFIFO(keepalived.NotifyFIFO); err != nil {
		log.Warn("stray VIP removal is off: keepalived's state changes cannot be read", "error", err)
	} else {
		notify = f
	}
	socks, errs := openSockets(&ifi, expectations(o.Plan), o.Took != nil || o.Released != nil)
	for _, err := range errs {
		log.Warn("split-brain detection works without this socket", "error", err)
	}
	g, err := newGuard(o, &ifi, notify, socks, defaultTiming(o.Plan.AdvertInterval()))
	if err != nil {
		if notify != nil {
			notify.Close()
		}
		socks.close()
		return nil, err
	}
	g.sysctl = "/proc/sys"
	return g, nil
}

// newGuard builds a guard on the given FIFO reader (nil: no stray removal)
// and sockets.
func newGuard(o Options, ifi *net.Interface, notify io.ReadCloser, socks sockets, t timing) (*Guard, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{
		iface:         ifi.Name,
		mac:           ifi.HardwareAddr,
		isVIP:         map[netip.Addr]bool{},
		instance:      map[netip.Addr]string{},
		expect:        expectations(o.Plan),
		notified:      o.Notified,
		duplicated:    o.Duplicated,
		heard:         o.Heard,
		host:          o.Host,
		keepalived:    o.Keepalived,
		notify:        notify,
		socks:         socks,
		probes:        map[netip.Addr]probeFrame{},
		announcements: map[netip.Addr][]byte{},
		timing:        t,
		log:           log,
		claims:        make(chan claim, 256),
		announces:     make(chan announcement, 64),
		clock:         newAdvertClock(),
		notes:         make(chan keepalived.Notification, 256),
		dup:           newDuplicates(t),
		contest:       newContests(t),
		own:           map[netip.Addr]bool{},
		foreign:       newForeign(),
		beats:         newHeartbeats(),
		conflicts:     map[netip.Addr][]net.HardwareAddr{},
		strayRemoved:  map[netip.Addr]uint64{},
		restored:      map[netip.Addr]uint64{},
		announced:     map[netip.Addr]uint64{},
	}
	for _, in := range o.Plan.Instances {
		for _, v := range in.VIPs {
			g.isVIP[v] = true
			g.instance[v] = in.Name
			g.strayRemoved[v] = 0
			g.restored[v] = 0
			g.announced[v] = 0
			if len(g.mac) != 6 {
				continue
			}
			var pf probeFrame
			var err error
			if v.Is4() {
				pf.frame, err = arpProbe(g.mac, v)
				pf.to = broadcastMAC
				if err == nil {
					g.announcements[v], err = arpAnnouncement(g.mac, v)
				}
			} else {
				pf.frame, pf.to, err = nsProbe(g.mac, v)
				pf.v6 = true
			}
			if err != nil {
				return nil, err
			}
			g.probes[v] = pf
		}
	}
	if len(g.mac) != 6 {
		log.Warn("duplicate VIP detection is off: the interface has no Ethernet address", "interface", g.iface)
	}
	g.ownership = newOwnership(t.grace, t.mend, g.instance)
	g.setHeartbeats(o.Plan, time.Now())
	g.takeovers = newTakeovers(g.clock, o.Took, o.Released)
	g.takeovers.replan(instancesOf(o.Plan))
	return g, nil
}

// instancesOf is what the takeovers need of p's instances: each one's
// router id, VIPs and this node's priority.
func instancesOf(p *plan.Plan) (keys map[string]key, vips map[string][]netip.Addr, priority map[string]int) {
	keys, vips, priority = map[string]key{}, map[string][]netip.Addr{}, map[string]int{}
	for _, in := range p.Instances {
		keys[in.Name] = key{v6: in.Is6(), vrid: int(in.RouterID)}
		vips[in.Name] = in.VIPs
		priority[in.Name] = in.Priority
	}
	return keys, vips, priority
}

// announcement is this node announcing a VIP of an instance.
type announcement struct {
	instance string
	at       time.Time
}

// setHeartbeats takes p's peers: keepalived's unicast peers get this
// node's heartbeats, the peers that send them are listened to.
func (g *Guard) setHeartbeats(p *plan.Plan, now time.Time) {
	var to []netip.Addr
	src := map[bool]netip.Addr{}
	for _, in := range p.Instances {
		if in.UnicastSource.IsValid() {
			src[in.Is6()] = in.UnicastSource
		}
		for _, a := range in.UnicastPeers {
			if !a.IsUnspecified() && !slices.Contains(to, a) {
				to = append(to, a)
			}
		}
	}
	slices.SortFunc(to, netip.Addr.Compare)
	g.sendMu.Lock()
	g.sendTo, g.src = to, src
	g.sendMu.Unlock()
	g.beats.setPeers(p.Fleet.Heartbeats, now)
}

// Replan takes a plan of the same VIPs and instances with other unicast
// peers (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods): a new member's adverts are
// then a member's, not a foreign speaker's, in Go and in the kernel filter.
func (g *Guard) Replan(p *plan.Plan) {
	e := expectations(p)
	now := time.Now()
	g.expectMu.Lock()
	if g.departed == nil {
		g.departed = map[netip.Addr]time.Time{}
	}
	g.departedGrace = 3 * p.AdvertInterval()
	for a, at := range g.departed {
		if now.Sub(at) > g.departedGrace || peerIn(e, a) {
			delete(g.departed, a)
		}
	}
	for _, old := range g.expect {
		for _, a := range old.peers {
			if !peerIn(e, a) {
				g.departed[a] = now
			}
		}
	}
	g.expect = e
	g.expectMu.Unlock()
	g.setHeartbeats(p, now)
	g.takeovers.replan(instancesOf(p))
	for _, s := range []struct {
		c  conn
		v6 bool
	}{{g.socks.vrrp4, false}, {g.socks.vrrp6, true}} {
		pc, ok := s.c.(net.PacketConn)
		if !ok {
			continue
		}
		if err := setAdvertFilter(pc, e, s.v6); err != nil {
			g.log.Warn("the VRRP socket keeps its old filter: adverts of new members may count as foreign", "error", err)
		}
	}
}

// peerIn says whether a is a unicast peer of any router id of e.
func peerIn(e map[key]expectation, a netip.Addr) bool {
	for _, x := range e {
		if slices.Contains(x.peers, a) {
			return true
		}
	}
	return false
}

// Snapshot is what the guard has seen, for the metrics.
type Snapshot struct {
	// Duplicates maps every VIP in conflict to the MACs of the other
	// hosts that answer for it.
	Duplicates map[netip.Addr][]net.HardwareAddr
	// StrayRemoved counts, per configured VIP, its removals as a stray.
	StrayRemoved map[netip.Addr]uint64
	// Restored counts, per configured VIP, the times it was put back on
	// the interface: its instance was MASTER without it.
	Restored map[netip.Addr]uint64
	// Announced counts, per configured VIP, its announcements after
	// another host stopped answering for it.
	Announced map[netip.Addr]uint64
	// Foreign counts foreign adverts per router id and source.
	Foreign []ForeignAdverts
	// Peers are the peers that send heartbeats, and whether they are
	// heard.
	Peers []PeerHeard
}

// Snapshot returns the current state; it is safe to call from any
// goroutine.
func (g *Guard) Snapshot() Snapshot {
	g.mu.Lock()
	s := Snapshot{Duplicates: maps.Clone(g.conflicts), StrayRemoved: maps.Clone(g.strayRemoved), Restored: maps.Clone(g.restored), Announced: maps.Clone(g.announced)}
	g.mu.Unlock()
	s.Foreign = g.foreign.snapshot()
	s.Peers = g.beats.snapshot()
	return s
}

// Run watches until ctx ends, then closes its sockets and the FIFO. It
// returns an error when one of its readers fails (a panic on a packet),
// nil when ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		g.Close()
		wg.Wait()
	}()
	failed := make(chan error, 1)
	// goSafe runs a reader of the guard; a reader that panics ends Run
	// with its error.
	goSafe := func(what string, fn func()) {
		wg.Go(func() {
			if err := component.Safe(what, func() error { fn(); return nil }); err != nil {
				select {
				case failed <- err:
				default:
				}
			}
		})
	}
	changes := make(chan struct{}, 1)
	goSafe("the address watch", func() {
		if err := g.host.WatchAddrs(ctx, g.iface, changes); err != nil {
			g.log.Warn("address changes are not reported; listing the addresses every few seconds instead", "interface", g.iface, "error", err)
		}
	})
	if g.socks.arp != nil {
		g.filterClaims()
		d := newARPDecoder()
		goSafe("the ARP reader", func() { g.readClaims(ctx, g.socks.arp, func(b []byte, _ net.Addr) []claim { return d.claims(b) }) })
	}
	if g.socks.naIn != nil {
		d := newNDPDecoder()
		goSafe("the neighbour advertisement reader", func() { g.readClaims(ctx, g.socks.naIn, d.claimsFrom) })
	}
	if g.socks.vrrp4 != nil {
		goSafe("the VRRP reader", func() { g.readAdverts(ctx, g.socks.vrrp4, false) })
	}
	if g.socks.vrrp6 != nil {
		goSafe("the VRRPv6 reader", func() { g.readAdverts(ctx, g.socks.vrrp6, true) })
	}
	if g.socks.clock4 != nil {
		goSafe("the takeovers' clock", func() { g.readClock(ctx, g.socks.clock4, false) })
	}
	if g.socks.clock6 != nil {
		goSafe("the takeovers' IPv6 clock", func() { g.readClock(ctx, g.socks.clock6, true) })
	}
	if g.socks.announce != nil {
		goSafe("the announcements reader", func() { g.readAnnouncements(ctx) })
	}
	if g.notify != nil {
		goSafe("the notify FIFO reader", func() { g.readNotifications(ctx) })
	}

	relist := time.NewTicker(g.timing.relist)
	defer relist.Stop()
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	g.heartbeat(time.Now())
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	g.relist(time.Now())
	for {
		wait := time.Hour
		if at, ok := g.next(); ok {
			wait = max(time.Until(at), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-changes:
			g.changed(time.Now())
		case <-relist.C:
			g.relist(time.Now())
		case <-beat.C:
			g.heartbeat(time.Now())
		case c := <-g.claims:
			g.claim(time.Now(), c)
		case n := <-g.notes:
			g.note(time.Now(), n)
		case a := <-g.announces:
			g.takeovers.announced(a.instance, a.at)
		case <-timer.C:
			g.step(time.Now())
		}
	}
}

// Close closes the guard's sockets and keepalived's notify FIFO; Run does
// it as it returns, a run that never started Run calls it. It may be
// called more than once.
func (g *Guard) Close() {
	g.closeOnce.Do(func() {
		g.socks.close()
		if g.notify != nil {
			g.notify.Close()
		}
	})
}

// claim applies another host's claim on a VIP this node holds. A claim
// without a MAC (a duplicate address detection probe) only starts a
// contest: a duplicate is reported with the other host's MAC.
func (g *Guard) claim(now time.Time, c claim) {
	if c.mac != nil {
		g.dup.claim(now, c.addr, c.mac)
	}
	g.probe(g.contest.claim(now, c.addr, c.mac))
}

// changed lists the addresses after the kernel said they changed, at once
// when the last listing is relistGap old, else when it will be.
func (g *Guard) changed(now time.Time) {
	if now.Sub(g.listed) >= g.timing.relistGap {
		g.relist(now)
		return
	}
	if g.relistAt.IsZero() {
		g.relistAt = g.listed.Add(g.timing.relistGap)
	}
}

// next returns when the earliest of the detectors' next steps, or a
// listing held back, is due.
func (g *Guard) next() (time.Time, bool) {
	at := g.relistAt
	for _, next := range []func() (time.Time, bool){g.dup.next, g.ownership.next, g.contest.next, g.takeovers.next} {
		if t, ok := next(); ok && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at, !at.IsZero()
}

// note applies one of keepalived's notifications. Lines that keepalived
// wrote before it restarted no longer hold: a new keepalived announces
// every instance again.
func (g *Guard) note(now time.Time, n keepalived.Notification) {
	g.checkRestart(now)
	g.ownership.notify(now, n)
	switch n.State {
	case keepalived.StateNameMaster, keepalived.StateNameBackup, keepalived.StateNameFault, keepalived.StateNameStop:
		g.takeovers.note(now, n.Instance, string(n.State))
	}
	if n.State == keepalived.StateNameMaster {
		if _, vips, _, ok := g.takeovers.instance(n.Instance); ok {
			g.contest.taken(now, vips)
		}
	}
}

// checkRestart drops keepalived's word when another keepalived runs (or
// none), and marks every instance stopped when ipfailover stops
// keepalived: the VIPs it removes then are not missing.
func (g *Guard) checkRestart(now time.Time) {
	if pid := g.keepalived.PID(); pid != g.pid {
		g.ownership.forget()
		g.takeovers.restart(now)
		g.pid = pid
	}
	if g.keepalived.Stopping() {
		g.ownership.stopAll(now)
	}
}

// step does what is due: probes and conflict changes, stray removals.
func (g *Guard) step(now time.Time) {
	// keepalived's latest word first: a stray must not be removed on an
	// old state while the line that says MASTER waits in the channel.
	for drained := false; !drained; {
		select {
		case n := <-g.notes:
			g.note(now, n)
		default:
			drained = true
		}
	}
	g.checkRestart(now)
	g.takeovers.due(now)
	if !g.relistAt.IsZero() && !g.relistAt.After(now) {
		g.relist(now)
	}
	// Rounds that end within probeBatch end now; regular rounds end on
	// the grid: at 254 VIPs the loop wakes about once a second, not ten
	// times.
	probe, changes := g.dup.due(now, probeBatch)
	g.send(probe)
	g.report(changes)
	asks, ended, announce, again := g.contest.due(now)
	g.probe(asks)
	for _, e := range ended {
		if len(e.still) > 0 {
			g.log.Info("VIP contest: a host no longer answers for it while another still does; announcing it from this node",
				"vip", e.vip, "other_mac", macList(e.macs), "still_answering", macList(e.still), "lasted", e.lasted.Round(time.Millisecond))
			continue
		}
		g.log.Info("VIP contest over: the other host no longer answers for it; announcing it from this node",
			"vip", e.vip, "other_mac", macList(e.macs), "lasted", e.lasted.Round(time.Millisecond))
	}
	g.announce(announce, true)
	g.announce(again, false)
	if strays, missing := g.ownership.due(now); len(strays)+len(missing) > 0 {
		for _, v := range strays {
			g.removeStray(now, v)
		}
		restored := g.restore(now, missing)
		g.relist(now)
		g.announce(restored, false)
	}
}

// relist reads the interface's addresses: which VIPs this node holds, and
// its own addresses.
func (g *Guard) relist(now time.Time) {
	g.listed, g.relistAt = now, time.Time{}
	listed, err := g.host.List(g.iface)
	if err != nil {
		if !g.listErr {
			g.log.Warn("listing the addresses for split-brain detection", "interface", g.iface, "error", err)
			g.listErr = true
		}
		return
	}
	g.listErr = false
	var held []netip.Addr
	own := map[netip.Addr]bool{}
	for _, p := range listed {
		a := p.Addr().Unmap()
		if g.isVIP[a] {
			held = append(held, a)
		} else {
			own[a] = true
		}
	}
	g.ownMu.Lock()
	g.own = own
	g.ownMu.Unlock()
	g.linkLocal = netip.Addr{}
	for _, p := range listed {
		if a := p.Addr(); a.Is6() && a.IsLinkLocalUnicast() && !g.isVIP[a] {
			g.linkLocal = a
			break
		}
	}
	probe, ended := g.dup.setHeld(now, held)
	g.send(probe)
	g.report(ended)
	g.ownership.setHeld(now, held)
	g.probe(g.contest.setHeld(now, held))
}

// filterClaims has the ARP socket's kernel filter pass the claims on the
// deployment's IPv4 VIPs, held or not: a claim read just before this node's
// listing shows a VIP it has taken starts a contest too (see contests).
func (g *Guard) filterClaims() {
	var v4 []netip.Addr
	for v := range g.isVIP {
		if v.Is4() {
			v4 = append(v4, v)
		}
	}
	slices.SortFunc(v4, netip.Addr.Compare)
	s, ok := g.socks.arp.(filterable)
	if !ok {
		return
	}
	raw, err := bpf.Assemble(arpProgram(v4))
	if err == nil {
		err = s.SetBPF(raw)
	}
	if err != nil {
		g.log.Warn("setting the ARP socket's filter: other hosts' claims on the VIPs go unseen", "interface", g.iface, "error", err)
	}
}

// send sends the probes of vips, VIPs this node holds, to every host.
func (g *Guard) send(vips []netip.Addr) {
	for _, v := range vips {
		if pf, ok := g.heldProbe(v); ok {
			g.write(v, pf.v6, pf.frame, pf.to, "a duplicate VIP probe")
		}
	}
}

// heldProbe is the probe of v, a VIP this node holds: for IPv6, a question
// from the node's link-local address whose answer comes back to this node
// alone (nsQuestion), while the interface has one; otherwise the probe
// built at the start.
func (g *Guard) heldProbe(v netip.Addr) (probeFrame, bool) {
	pf, ok := g.probes[v]
	if !ok || !pf.v6 || !g.linkLocal.IsValid() {
		return pf, ok
	}
	frame, to, err := nsQuestion(g.mac, g.linkLocal, v)
	if err != nil {
		return pf, ok
	}
	return probeFrame{frame: frame, to: to, v6: true}, true
}

// probe sends contest probes, each to the one host it asks (to every host
// when its MAC is unknown).
func (g *Guard) probe(ps []probeTo) {
	for _, p := range ps {
		pf, ok := g.heldProbe(p.vip)
		if !ok {
			continue
		}
		if p.mac == nil {
			g.write(p.vip, pf.v6, pf.frame, pf.to, "a duplicate VIP probe")
			continue
		}
		g.write(p.vip, pf.v6, withDst(pf.frame, p.mac), p.mac, "a duplicate VIP probe")
	}
}

// announce sends a gratuitous ARP or an unsolicited neighbour
// advertisement for each of vips that is on the interface right now (the
// notification of keepalived removing one may not have arrived yet), twice
// (a lost frame is not a stranded client). It counts them when count is
// set: ipfailover_vip_announcements_total counts the ends of contests.
func (g *Guard) announce(vips []netip.Addr, count bool) {
	if len(vips) == 0 {
		return
	}
	if listed, err := g.host.List(g.iface); err == nil {
		on := map[netip.Addr]bool{}
		for _, p := range listed {
			on[p.Addr().Unmap()] = true
		}
		vips = slices.DeleteFunc(slices.Clone(vips), func(v netip.Addr) bool { return !on[v] })
	}
	for _, v := range vips {
		frame, to := g.announcements[v], broadcastMAC
		if v.Is6() {
			var err error
			if frame, err = naAnnouncement(g.mac, v, g.forwards6()); err != nil {
				continue // no Ethernet MAC: no probes either
			}
			to = allNodesMAC
		}
		if frame == nil {
			continue
		}
		sent := false
		for range 2 {
			sent = g.write(v, v.Is6(), frame, to, "an announcement of a VIP") || sent
		}
		if sent && count {
			g.mu.Lock()
			g.announced[v]++
			g.mu.Unlock()
		}
	}
}

// forwards6 reports whether the interface forwards IPv6 (a router
// announces itself as one).
func (g *Guard) forwards6() bool {
	if g.sysctl == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(g.sysctl, "net", "ipv6", "conf", g.iface, "forwarding"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// write sends frame to the MAC to on the family's packet socket, logging
// the first of a run of failures; it reports whether it was sent.
func (g *Guard) write(v netip.Addr, v6 bool, frame []byte, to net.HardwareAddr, what string) bool {
	c := g.socks.arp
	if v6 {
		c = g.socks.nsOut
	}
	if c == nil {
		return false
	}
	if _, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: to}); err != nil {
		if !g.sendErr {
			g.log.Warn("sending "+what, "vip", v, "interface", g.iface, "error", err)
			g.sendErr = true
		}
		return false
	}
	g.sendErr = false
	return true
}

// report logs the start and end of conflicts and then publishes them, so
// whoever sees a conflict in a snapshot can read its log line.
func (g *Guard) report(changes []conflictChange) {
	if len(changes) == 0 {
		return
	}
	defer g.publish()
	for _, c := range changes {
		if g.duplicated != nil {
			g.duplicated(Duplicate{VIP: c.vip, Instance: g.instance[c.vip], Others: c.macs, Started: c.started, Released: c.released, Lasted: c.lasted})
		}
		macs := macList(c.macs)
		switch {
		case c.started:
			g.log.Warn("duplicate VIP: another host answers for a VIP this node holds",
				"vip", c.vip, "other_mac", macs, "instance", g.instance[c.vip], "keepalived_state", g.stateName(c.vip))
		case c.released:
			g.log.Info("duplicate VIP over: this node released it",
				"vip", c.vip, "other_mac", macs, "lasted", c.lasted.Round(time.Millisecond))
		default:
			g.log.Info("duplicate VIP over: no other host answers for it",
				"vip", c.vip, "other_mac", macs, "lasted", c.lasted.Round(time.Millisecond))
		}
	}
}

func (g *Guard) stateName(v netip.Addr) string {
	if st, ok := g.ownership.state(v); ok {
		return string(st.state)
	}
	return "unknown"
}

func macList(ms []net.HardwareAddr) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return strings.Join(s, ",")
}

// removeStray deletes a stray VIP, with whatever prefix length it has
// (host.ReleaseVIPs), and counts it.
func (g *Guard) removeStray(now time.Time, v netip.Addr) {
	st, _ := g.ownership.state(v)
	wait := []any{"grace", g.timing.grace}
	if g.ownership.putBack(v) {
		wait = []any{"put_back_here", true}
	}
	removed, err := host.ReleaseVIPs(g.host, g.iface, []netip.Addr{v})
	if err != nil {
		g.log.Error("removing a stray VIP", "vip", v, "interface", g.iface, "error", err)
		g.ownership.failed(now, v)
	}
	if len(removed) == 0 {
		return
	}
	// The log line first: whoever sees the count can read the line.
	g.log.Warn("removed a stray VIP: keepalived's instance for it is not MASTER on this node",
		append([]any{"vip", removed[0], "instance", g.instance[v], "keepalived_state", string(st.state)}, wait...)...)
	g.mu.Lock()
	g.strayRemoved[v]++
	g.mu.Unlock()
	// Clients may have learnt this node's MAC for the VIP. A probe for it
	// tells the node that holds it (its guard takes a probe as a claim,
	// finds this node silent and announces the VIP), and asks nobody else
	// to change anything. For IPv6 it is a duplicate address detection
	// probe, from the unspecified address, which the guards take for a
	// claim; the holder's kernel answers it to all nodes, which points the
	// clients at the holder too.
	if pf, ok := g.probes[v]; ok {
		g.write(v, pf.v6, pf.frame, pf.to, "a duplicate VIP probe")
	}
}

// restore puts back VIPs whose instance keepalived reports MASTER but which
// are not on the interface, counts them and returns the ones it added.
// keepalived sent its announcements as it became MASTER, so clients may
// already send to this node; they are announced again once on.
func (g *Guard) restore(now time.Time, vips []netip.Addr) []netip.Addr {
	var added []netip.Addr
	for _, v := range vips {
		st, _ := g.ownership.state(v)
		p := netip.PrefixFrom(v, v.BitLen())
		err := g.host.Add(g.iface, p)
		if errors.Is(err, host.ErrAddrExists) {
			continue // added since the listing: the relist sees it
		}
		if err != nil {
			g.log.Error("putting back a VIP keepalived holds as MASTER", "vip", p, "interface", g.iface, "error", err)
			g.ownership.failed(now, v)
			continue
		}
		g.ownership.put(v)
		added = append(added, v)
		// The log line first: whoever sees the count can read the line.
		g.log.Warn("put back a missing VIP: keepalived's instance for it is MASTER on this node, the VIP was not on the interface",
			"vip", p, "instance", g.instance[v], "keepalived_state", string(st.state),
			"master_for", now.Sub(st.since).Round(time.Millisecond), "after", g.timing.mend)
		g.mu.Lock()
		g.restored[v]++
		g.mu.Unlock()
	}
	return added
}

// publish copies the loop's state for Snapshot.
func (g *Guard) publish() {
	c := g.dup.conflicts()
	g.mu.Lock()
	g.conflicts = c
	g.mu.Unlock()
}

// readClaims reads claims on addresses from c and passes on the ones by
// other hosts on the VIPs.
func (g *Guard) readClaims(ctx context.Context, c conn, decode func([]byte, net.Addr) []claim) {
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if !g.readFailed(ctx, "claims", err) {
				return
			}
			continue
		}
		for _, cl := range g.decodeClaims(decode, buf[:n], from) {
			if !g.isVIP[cl.addr] || bytes.Equal(cl.mac, g.mac) {
				continue
			}
			select {
			case g.claims <- cl:
			case <-ctx.Done():
				return
			}
		}
	}
}

// decodeClaims decodes a packet from the wire; one that makes the decoder
// panic is dropped, and the guard goes on.
func (g *Guard) decodeClaims(decode func([]byte, net.Addr) []claim, b []byte, from net.Addr) (out []claim) {
	if err := component.Safe("decoding a packet", func() error { out = decode(b, from); return nil }); err != nil {
		g.droppedPacket(err)
		return nil
	}
	return out
}

// droppedPacket logs a packet whose handling panicked, once a minute at
// most: a bug met by a packet from the wire, not a reason to stop.
func (g *Guard) droppedPacket(err error) {
	now := time.Now()
	g.mu.Lock()
	due := now.Sub(g.lastDropLog) >= time.Minute
	if due {
		g.lastDropLog = now
	}
	g.mu.Unlock()
	if due {
		g.log.Error("dropped a packet whose handling failed", "interface", g.iface, "error", err)
	}
}

// readFailed handles a read error: false when the guard is stopping,
// else it logs and pauses a second (a socket whose interface went away
// fails at once, again and again).
func (g *Guard) readFailed(ctx context.Context, what string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	g.log.Warn("reading "+what+" for split-brain detection", "interface", g.iface, "error", err)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Second):
		return true
	}
}

// readAdverts reads VRRP adverts and counts and logs the foreign ones.
func (g *Guard) readAdverts(ctx context.Context, c conn, v6 bool) {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if !g.readFailed(ctx, "VRRP adverts", err) {
				return
			}
			continue
		}
		ipa, ok := from.(*net.IPAddr)
		if !ok {
			continue
		}
		src, ok := netip.AddrFromSlice(ipa.IP)
		if !ok {
			continue
		}
		if err := component.Safe("checking a VRRP advert", func() error { g.advert(buf[:n], src.Unmap(), v6); return nil }); err != nil {
			g.droppedPacket(err)
		}
	}
}

// advert checks one advert from src.
func (g *Guard) advert(b []byte, src netip.Addr, v6 bool) {
	g.ownMu.RLock()
	mine := g.own[src]
	g.ownMu.RUnlock()
	if mine {
		return
	}
	if isHeartbeat(b) {
		if g.beats.heard(src, time.Now()) {
			g.log.Info("a peer's VRRP arrives again", "peer", src)
		}
		return
	}
	a, err := parseAdvert(b, v6)
	if err != nil {
		return
	}
	g.expectMu.RLock()
	e, ok := g.expect[key{v6: v6, vrid: a.vrid}]
	left, departed := g.departed[src]
	departed = departed && time.Since(left) <= g.departedGrace
	g.expectMu.RUnlock()
	if !ok {
		return
	}
	if departed && e.peers != nil {
		e.peers = append(slices.Clone(e.peers), src)
	}
	diffs := e.differences(a, src)
	if len(diffs) == 0 {
		return
	}
	if e.member(a, src, departed) {
		// A pod of the workload that keepalived does not hear. Priority
		// 255 is a bridge's relay and 0 a goodbye: only another
		// keepalived's own adverts say what it speaks.
		if g.heard != nil && a.priority > 0 && a.priority < 255 {
			g.heard(src, a.version, a.interval)
		}
		return
	}
	if g.foreign.add(a.vrid, src) {
		g.log.Warn("foreign VRRP speaker: adverts for this deployment's router id from outside it",
			"source", src, "vrid", a.vrid, "instance", e.instance, "differences", strings.Join(diffs, "; "),
			"hint", "another VRRP deployment on this network uses the same router ids: find it by its address and give one of the two other ids: "+
				"OPENSHIFT_HA_VRRP_ID_OFFSET moves this deployment's, `ipfailover vr-ids CLUSTER` prints the ids an OpenShift on-prem cluster uses, for HA_EXCLUDED_VRRP_IDS")
	}
}

// heartbeat sends every unicast peer a heartbeat, and says which peers
// fell silent.
func (g *Guard) heartbeat(now time.Time) {
	g.sendMu.Lock()
	to, src := g.sendTo, g.src
	g.sendMu.Unlock()
	failed := false
	for _, a := range to {
		c := g.socks.vrrp4
		if a.Is6() {
			c = g.socks.vrrp6
		}
		if c == nil {
			continue
		}
		if err := sendFrom(c, heartbeatPacket(src[a.Is6()], a), src[a.Is6()], a); err != nil && !failed {
			failed = true
			if !g.beatErr {
				g.log.Warn("sending a heartbeat to a peer", "peer", a, "error", err)
			}
		}
	}
	g.beatErr = failed
	for _, p := range g.beats.silences(now) {
		last := "never"
		if !p.Last.IsZero() {
			last = now.Sub(p.Last).Round(time.Millisecond).String() + " ago"
		}
		g.log.Warn("a peer's VRRP does not arrive: IP protocol 112 from it is dropped on the way (a host firewall?); a VIP it holds may be held here too",
			"peer", p.Addr, "last_heard", last, "hint", "let IP protocol 112 (vrrp) in on every node, e.g. `iptables -I INPUT -p vrrp -j ACCEPT`; `ipfailover status` shows who hears whom")
	}
}

// readClock notes every advert of another node for this deployment's
// router ids, for the takeovers, at the time the kernel says it arrived
// when the socket gives it (stampArrivals).
func (g *Guard) readClock(ctx context.Context, c conn, v6 bool) {
	r := newClockReader(c, v6)
	for {
		b, src, at, err := r.read()
		if err != nil {
			if !g.readFailed(ctx, "the takeovers' clock", err) {
				return
			}
			continue
		}
		if b == nil {
			continue
		}
		g.ownMu.RLock()
		mine := g.own[src]
		g.ownMu.RUnlock()
		if !mine {
			g.clock.heard(b, src, v6, at)
		}
	}
}

// clockReader reads the clock's socket: each VRRP message with its source
// and arrival time.
type clockReader struct {
	c       conn
	stamped stampedReader // nil: timed as read
	v6      bool
	buf     []byte
	oob     []byte
}

func newClockReader(c conn, v6 bool) *clockReader {
	r := &clockReader{c: c, v6: v6, buf: make([]byte, 2048), oob: make([]byte, 128)}
	r.stamped, _ = c.(stampedReader)
	return r
}

// read returns the next VRRP message (valid until the next read), its
// source and arrival; a nil message and no error for a packet that is not
// one (no IPv4 header where one belongs, no IP source).
func (r *clockReader) read() ([]byte, netip.Addr, time.Time, error) {
	var (
		n    int
		from net.Addr
		err  error
		at   time.Time
	)
	if r.stamped != nil {
		var oobn int
		var ipa *net.IPAddr
		n, oobn, _, ipa, err = r.stamped.ReadMsgIP(r.buf, r.oob)
		at = arrival(r.oob[:oobn], time.Now())
		if ipa != nil {
			from = ipa
		}
		// Read with its control messages, an IPv4 packet keeps its
		// header.
		if err == nil && !r.v6 {
			if n = stripIPv4(r.buf[:n]); n < 0 {
				return nil, netip.Addr{}, at, nil
			}
		}
	} else {
		n, from, err = r.c.ReadFrom(r.buf)
		at = time.Now()
	}
	if err != nil {
		return nil, netip.Addr{}, at, err
	}
	ipa, ok := from.(*net.IPAddr)
	if !ok {
		return nil, netip.Addr{}, at, nil
	}
	src, ok := netip.AddrFromSlice(ipa.IP)
	if !ok {
		return nil, netip.Addr{}, at, nil
	}
	return r.buf[:n], src.Unmap(), at, nil
}

// stripIPv4 moves an IPv4 packet's payload to the start of b and returns
// its length, or -1 when b is no IPv4 packet with a whole header.
func stripIPv4(b []byte) int {
	if len(b) < 20 || b[0]>>4 != 4 {
		return -1
	}
	l := int(b[0]&0x0f) * 4
	if l < 20 || l > len(b) {
		return -1
	}
	return copy(b, b[l:])
}

// readAnnouncements passes this node's announcements of its VIPs to the
// loop, without waiting: one that finds the loop's queue full is not
// timed.
func (g *Guard) readAnnouncements(ctx context.Context) {
	buf := make([]byte, 1500)
	for {
		n, _, err := g.socks.announce.ReadFrom(buf)
		if err != nil {
			if !g.readFailed(ctx, "announcements", err) {
				return
			}
			continue
		}
		at := time.Now()
		addr, ok := announcedAddr(buf[:n])
		if !ok || !g.isVIP[addr] {
			continue
		}
		select {
		case g.announces <- announcement{instance: g.instance[addr], at: at}:
		default:
		}
	}
}

// readNotifications passes keepalived's notify lines to the loop.
func (g *Guard) readNotifications(ctx context.Context) {
	err := keepalived.ReadNotifications(g.notify, func(n keepalived.Notification) {
		if g.notified != nil {
			g.notified(n)
		}
		select {
		case g.notes <- n:
		case <-ctx.Done():
		}
	}, func(err error) {
		g.log.Warn("keepalived's notify FIFO", "error", err)
	})
	if err != nil && ctx.Err() == nil {
		g.log.Warn("stopped reading keepalived's notify FIFO: stray VIP removal is off", "error", err)
	}
}
