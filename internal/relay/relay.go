// Package relay is the bridge to the nodes that do not hear this node's
// keepalived: nodes in multicast mode (the shipped image, or ipfailover
// without unicast peers), and pods of an older image that speak VRRPv2
// with unicast peers while this pod's keepalived speaks VRRPv3 (see
// config.Config.Adverts). keepalived's unicast instances refuse every
// multicast advert and its multicast instances every unicast one, and a
// VRRPv2 router and a VRRPv3 one drop each other's adverts: while a
// workload is half migrated, each side would elect a master of every VIP,
// and hold it twice.
//
// The relay makes this node heard in the other side's own VRRP: for every
// instance this node's keepalived is MASTER of, it sends the instance's
// advert, with priority 255, to the multicast group and to each VRRPv2
// pod, at the interval they speak. They hear a master above them: a master
// of theirs gives its VIPs up at the first such advert (a handover of a
// few milliseconds), their backups stay backups. This node never hears the
// other side, and needs not: the bridge is one-way, and this side always
// wins. When every node of this side is gone, the other side stops
// hearing the relay and takes the VIPs back after its master-down
// interval, as after any crash; the last node of this side says goodbye
// with priority 0, so that it takes them at once.
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// Multicast groups of VRRP.
var (
	group4 = netip.MustParseAddr("224.0.0.18")
	group6 = netip.MustParseAddr("ff02::12")
)

// Keepalived is the supervised keepalived.
type Keepalived interface {
	// PID is keepalived's process id, 0 while none runs.
	PID() int
}

// sender sends adverts, to a VRRP multicast group or to one node. Opening
// one needs CAP_NET_RAW.
type sender interface {
	send(b []byte, to netip.Addr) error
	close()
}

// opener opens the sender of one family on an interface, sending from src
// (IPv4; IPv6 sends from the interface's link-local address).
type opener func(iface string, src netip.Addr, v6 bool) (sender, error)

// Options configure a Relay.
type Options struct {
	// Plan gives the instances, the interface, the source and the VRRP
	// the other side speaks.
	Plan       *plan.Plan
	Keepalived Keepalived
	Logger     *slog.Logger
}

// Listeners are the nodes the relay speaks to, as the settings and the
// workload's pods say.
type Listeners struct {
	// Multicast relays to the VRRP multicast groups.
	Multicast bool
	// VRRPv2 are the IPv4 addresses of pods that speak VRRPv2 with
	// unicast peers.
	VRRPv2 []netip.Addr
	// Why says what decided them, for the log.
	Why string
}

// HeardHold is how long an address the relay heard speaking VRRPv2 (Heard)
// stays one it relays to after its last such advert: a node of the other
// side that yields to the relay falls silent, a backup, and must go on
// hearing it.
const HeardHold = time.Minute

// speech is the VRRP the relay sends to some listeners.
type speech struct {
	version  int
	interval time.Duration
}

// instance is what the relay needs of one of keepalived's instances.
type instance struct {
	vrid uint8
	vips []netip.Addr
	// alone says that no unicast peer would take the instance over: the
	// other side gets a priority-0 advert when the relay stops.
	alone bool
}

// Relay sends the adverts. It relays to nobody until SetListeners or
// Heard names someone.
type Relay struct {
	keepalived Keepalived
	log        *slog.Logger
	open       opener
	kick       chan struct{}
	sent       atomic.Uint64
	now        func() time.Time

	mu        sync.Mutex
	listeners Listeners
	// heard are the addresses heard speaking VRRPv2 for this
	// deployment's instances, each with its interval and until when it is
	// relayed to.
	heard map[netip.Addr]heardSpeaker
	iface string
	src4  netip.Addr
	// multicast is what the multicast nodes speak (IPv4; IPv6 is VRRPv3
	// at the same interval), v2 what the VRRPv2 pods of SetListeners
	// speak.
	multicast, v2 speech
	instances     map[string]instance // by name
	auth          [8]byte
	master        map[string]bool
	pid           int
	senders       map[bool]sender // by v6
	sendErr       bool
}

type heardSpeaker struct {
	interval time.Duration
	until    time.Time
}

// New returns a Relay for p's instances.
func New(o Options) *Relay {
	r := &Relay{keepalived: o.Keepalived, log: o.Logger, open: openSender, kick: make(chan struct{}, 1), now: time.Now,
		heard: map[netip.Addr]heardSpeaker{}, master: map[string]bool{}, senders: map[bool]sender{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.Replan(o.Plan)
	return r
}

// Replan takes a new plan: new priorities and peers change nothing here; a
// new interface or source address reopens the sockets.
func (r *Relay) Replan(p *plan.Plan) {
	instances := map[string]instance{}
	var auth [8]byte
	copy(auth[:], p.Config.Name)
	var src4 netip.Addr
	for _, in := range p.Instances {
		if !in.UnicastSource.IsValid() {
			continue
		}
		if !in.Is6() {
			src4 = in.UnicastSource
		}
		instances[in.Name] = instance{vrid: uint8(in.RouterID), vips: in.VIPs, alone: in.Alone()}
	}
	interval, v3 := p.Config.BridgeAdverts()
	multicast := speech{version: 2, interval: interval}
	if v3 {
		multicast.version = 3
	}
	// VRRPv2 has whole seconds only: pods that speak it with these
	// settings at a fraction of a second do not exist, but a pod that
	// says so itself is spoken to at 1 s.
	v2 := speech{version: 2, interval: interval}
	if v3 {
		v2.interval = time.Second
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Node.Interface != r.iface || src4 != r.src4 {
		r.closeSenders()
	}
	r.iface, r.src4, r.instances, r.auth, r.multicast, r.v2 = p.Node.Interface, src4, instances, auth, multicast, v2
}

// SetListeners sets who the relay speaks to, besides the addresses it
// heard speaking VRRPv2 (Heard).
func (r *Relay) SetListeners(l Listeners) {
	l.VRRPv2 = slices.Clone(l.VRRPv2)
	slices.SortFunc(l.VRRPv2, netip.Addr.Compare)
	r.mu.Lock()
	was := r.listeners
	r.listeners = l
	if !r.activeLocked() {
		r.closeSenders()
	}
	r.mu.Unlock()
	if was.Multicast == l.Multicast && slices.Equal(was.VRRPv2, l.VRRPv2) {
		return
	}
	if l.Multicast || len(l.VRRPv2) > 0 {
		r.log.Info("multicast bridge on: relaying this node's VRRP masters to the nodes that do not hear keepalived",
			"multicast", l.Multicast, "vrrp2_pods", fmt.Sprint(l.VRRPv2), "reason", l.Why, "priority", Priority)
		r.poke()
	} else {
		r.log.Info("multicast bridge off", "reason", l.Why)
	}
}

// Heard takes an advert src sent for one of this deployment's instances in
// VRRPv2, with interval, while this node's keepalived speaks VRRPv3: a
// node of the workload that speaks VRRPv2 (an older image, or one that
// switched its pods to VRRPv2) whatever the API server says. The relay
// speaks to it at once, and for HeardHold after its last such advert.
func (r *Relay) Heard(src netip.Addr, interval time.Duration) {
	if !src.Is4() || interval < time.Second || interval%time.Second != 0 {
		return
	}
	r.mu.Lock()
	h, known := r.heard[src]
	r.heard[src] = heardSpeaker{interval: interval, until: r.now().Add(HeardHold)}
	r.mu.Unlock()
	if !known || h.interval != interval {
		r.log.Info("multicast bridge: a node of the workload speaks VRRPv2; relaying this node's VRRP masters to it",
			"address", src, "interval", interval, "for", HeardHold)
		r.poke()
	}
}

// Active says whether the relay speaks to anyone.
func (r *Relay) Active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.activeLocked()
}

// Listening counts the nodes the relay speaks to: whether it relays to
// multicast, and the VRRPv2 pods, named by the API server or heard.
func (r *Relay) Listening() (multicast bool, vrrp2 int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listeners.Multicast, len(r.unicastLocked())
}

// Sent counts the adverts sent.
func (r *Relay) Sent() uint64 { return r.sent.Load() }

// Note takes one of keepalived's state changes; a new MASTER is relayed at
// once. A master that stops (keepalived is being stopped: it has sent its
// own priority-0 adverts) with no unicast peer to take over says goodbye
// to the other side at once too. Lines that are no state
// (MASTER_RX_LOWER_PRI: a master heard a lower priority, and stays master)
// change nothing.
func (r *Relay) Note(n keepalived.Notification) {
	switch n.State {
	case keepalived.StateNameMaster, keepalived.StateNameBackup, keepalived.StateNameFault, keepalived.StateNameStop:
	default:
		return
	}
	r.mu.Lock()
	r.checkRestart()
	was := r.master[n.Instance]
	r.master[n.Instance] = n.State == keepalived.StateNameMaster
	now := r.master[n.Instance]
	if was && n.State == keepalived.StateNameStop {
		r.goodbyeInstance(n.Instance)
	}
	r.mu.Unlock()
	if now && !was {
		r.poke()
	}
}

// checkRestart forgets the states of a keepalived that is gone: a new one
// announces every instance again. Called with mu held.
func (r *Relay) checkRestart() {
	if pid := r.keepalived.PID(); pid != r.pid {
		clear(r.master)
		r.pid = pid
	}
}

func (r *Relay) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// idle is how often the relay looks again while it speaks to nobody: an
// address heard speaking VRRPv2 expires.
const idle = time.Second

// Run relays until ctx ends, when keepalived is being stopped: then, for
// every instance it relays that has no unicast peer (this is the last node
// of this side: a rollback, or a lone node leaving), it sends one
// priority-0 advert, so that the other side takes the VIPs over at once,
// as from any leaving master, rather than after its master-down interval.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTimer(idle)
	defer t.Stop()
	defer func() {
		r.mu.Lock()
		r.goodbye()
		r.closeSenders()
		r.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.kick:
		}
		t.Reset(r.relay())
	}
}

// relay sends one advert for every instance keepalived is MASTER of to
// every listener, and says when to send the next ones: at the shortest
// interval of the listeners.
func (r *Relay) relay() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkRestart()
	unicast := r.unicastLocked()
	if !r.listeners.Multicast && len(unicast) == 0 {
		r.closeSenders()
		return idle
	}
	next := idle
	if r.listeners.Multicast {
		next = min(next, r.multicast.interval)
	}
	for _, s := range unicast {
		next = min(next, s.interval)
	}
	for _, name := range slices.Sorted(maps.Keys(r.instances)) {
		if !r.master[name] {
			continue
		}
		r.sendInstance(name, Priority, unicast)
	}
	return next
}

// target is a unicast listener and what it speaks.
type target struct {
	addr netip.Addr
	speech
}

// unicastLocked lists the VRRPv2 pods to relay to now, sorted: those the
// API server names and those heard, whose hold has not ended (the others
// are forgotten). Called with mu held.
func (r *Relay) unicastLocked() []target {
	now := r.now()
	byAddr := map[netip.Addr]speech{}
	for _, a := range r.listeners.VRRPv2 {
		byAddr[a] = r.v2
	}
	for a, h := range r.heard {
		if !h.until.After(now) {
			delete(r.heard, a)
			continue
		}
		byAddr[a] = speech{version: 2, interval: h.interval}
	}
	out := make([]target, 0, len(byAddr))
	for a, s := range byAddr {
		out = append(out, target{a, s})
	}
	slices.SortFunc(out, func(a, b target) int { return a.addr.Compare(b.addr) })
	return out
}

func (r *Relay) activeLocked() bool {
	return r.listeners.Multicast || len(r.unicastLocked()) > 0
}

// sendInstance sends instance name's advert with priority to every
// listener; called with mu held.
func (r *Relay) sendInstance(name string, priority uint8, unicast []target) {
	in := r.instances[name]
	v6 := in.vips[0].Is6()
	var errs []error
	count := func(err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		r.sent.Add(1)
	}
	if r.listeners.Multicast {
		a := advert{version: 3, vrid: in.vrid, priority: priority, interval: r.multicast.interval, vips: in.vips}
		to := group6
		if !v6 {
			to = group4
			if r.multicast.version == 2 {
				a.version, a.auth = 2, r.auth
			}
		}
		count(r.sendLocked(a, to))
	}
	if !v6 {
		for _, t := range unicast {
			a := advert{version: 2, vrid: in.vrid, priority: priority, interval: t.interval, vips: in.vips, auth: r.auth}
			count(r.sendLocked(a, t.addr))
		}
	}
	if len(errs) > 0 {
		if !r.sendErr {
			r.log.Warn("multicast bridge: sending an advert failed; the nodes that do not hear keepalived may take the VIPs", "instance", name, "error", errs[0])
			r.sendErr = true
		}
		return
	}
	r.sendErr = false
}

// goodbye sends the priority-0 adverts of Run's end for the instances
// still master (keepalived stopped without saying so); called with mu
// held.
func (r *Relay) goodbye() {
	for _, name := range slices.Sorted(maps.Keys(r.instances)) {
		if r.master[name] {
			r.goodbyeInstance(name)
		}
	}
}

// goodbyeInstance sends the other side a priority-0 advert for instance
// name, if no unicast peer takes it over; called with mu held.
func (r *Relay) goodbyeInstance(name string) {
	in, ok := r.instances[name]
	unicast := r.unicastLocked()
	if !ok || !in.alone || !r.listeners.Multicast && len(unicast) == 0 {
		return
	}
	before := r.sent.Load()
	r.sendInstance(name, 0, unicast)
	if r.sent.Load() > before {
		r.log.Info("multicast bridge: sent the nodes that do not hear keepalived a priority-0 advert", "instance", name)
	}
}

func (r *Relay) sendLocked(a advert, to netip.Addr) error {
	v6 := a.vips[0].Is6()
	b, err := a.marshal(r.src4, to)
	if err != nil {
		return err
	}
	s := r.senders[v6]
	if s == nil {
		if s, err = r.open(r.iface, r.src4, v6); err != nil {
			return fmt.Errorf("opening the VRRP socket on %s: %w (needs CAP_NET_RAW)", r.iface, err)
		}
		r.senders[v6] = s
	}
	return s.send(b, to)
}

// closeSenders closes the sockets; called with mu held.
func (r *Relay) closeSenders() {
	for v6, s := range r.senders {
		s.close()
		delete(r.senders, v6)
	}
}
