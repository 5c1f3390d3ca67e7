// Package relay is the multicast bridge of a migration from multicast to
// unicast VRRP. The two are separate VRRP domains: keepalived's unicast
// instances refuse every multicast advert, and multicast instances refuse
// unicast ones. So while a workload is half migrated, the nodes already on
// unicast and those still on multicast would each elect a master of every
// VIP, and hold it twice.
//
// The relay makes the unicast side heard: for every unicast instance this
// node's keepalived is MASTER of, it sends the instance's advert to the
// multicast group every advert interval, with priority 255. The multicast
// nodes hear a master above them: a multicast master gives its VIPs up at
// the first such advert (a handover of a few milliseconds), the backups
// stay backups. The unicast side never hears the multicast one, and needs
// not: the bridge is one-way, and the unicast side always wins. When every
// unicast node is gone, the multicast nodes stop hearing the relay and take
// the VIPs back after their master-down interval, as after any crash.
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
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

// sender sends adverts to a VRRP multicast group. Opening one needs
// CAP_NET_RAW.
type sender interface {
	send(b []byte, to netip.Addr) error
	close()
}

// opener opens the sender of one family on an interface, sending from src
// (IPv4; IPv6 sends from the interface's link-local address).
type opener func(iface string, src netip.Addr, v6 bool) (sender, error)

// Options configure a Relay.
type Options struct {
	// Plan gives the unicast instances, the interface and the source.
	Plan       *plan.Plan
	Keepalived Keepalived
	Logger     *slog.Logger
}

// Relay sends the adverts. It is off until SetActive turns it on.
type Relay struct {
	keepalived Keepalived
	log        *slog.Logger
	open       opener
	kick       chan struct{}
	sent       atomic.Uint64

	mu       sync.Mutex
	active   bool
	iface    string
	src4     netip.Addr
	interval time.Duration
	adverts  map[string]advert // by instance name
	// alone are the instances with no unicast peer: the multicast nodes
	// are the only others, and get a priority-0 advert when the relay stops.
	alone   map[string]bool
	master  map[string]bool
	pid     int
	senders map[bool]sender // by v6
	sendErr bool
}

// New returns a Relay for p's unicast instances.
func New(o Options) *Relay {
	r := &Relay{keepalived: o.Keepalived, log: o.Logger, open: openSender, kick: make(chan struct{}, 1), master: map[string]bool{}, senders: map[bool]sender{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.Replan(o.Plan)
	return r
}

// Replan takes a new plan: new priorities and peers change nothing here; a
// new interface or source address reopens the sockets.
func (r *Relay) Replan(p *plan.Plan) {
	adverts, alone := map[string]advert{}, map[string]bool{}
	var auth [8]byte
	copy(auth[:], p.Config.Name)
	var src4 netip.Addr
	for _, in := range p.Instances {
		if !in.UnicastSource.IsValid() {
			continue
		}
		a := advert{version: 3, vrid: uint8(in.RouterID), priority: Priority, interval: p.AdvertInterval(), vips: in.VIPs}
		if !in.Is6() {
			src4 = in.UnicastSource
			if p.VRRPVersion() == 2 {
				a.version, a.auth = 2, auth
			}
		}
		adverts[in.Name] = a
		alone[in.Name] = in.Alone()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Node.Interface != r.iface || src4 != r.src4 {
		r.closeSenders()
	}
	r.iface, r.src4, r.interval, r.adverts, r.alone = p.Node.Interface, src4, p.AdvertInterval(), adverts, alone
}

// SetActive turns the relay on or off; why says what decided it, for the
// log.
func (r *Relay) SetActive(on bool, why string) {
	r.mu.Lock()
	changed := r.active != on
	r.active = on
	if !on {
		r.closeSenders()
	}
	r.mu.Unlock()
	if !changed {
		return
	}
	if on {
		r.log.Info("multicast bridge on: relaying this node's unicast masters to nodes that speak multicast VRRP", "reason", why, "priority", Priority)
		r.poke()
	} else {
		r.log.Info("multicast bridge off", "reason", why)
	}
}

// Active says whether the relay is on.
func (r *Relay) Active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

// Sent counts the adverts sent.
func (r *Relay) Sent() uint64 { return r.sent.Load() }

// Note takes one of keepalived's state changes; a new MASTER is relayed at
// once.
func (r *Relay) Note(n keepalived.Notification) {
	r.mu.Lock()
	r.checkRestart()
	was := r.master[n.Instance]
	r.master[n.Instance] = n.State == keepalived.StateNameMaster
	now := r.master[n.Instance]
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

// Run relays until ctx ends, when keepalived is being stopped: then,
// for every instance it relays that has no unicast peer (this is the last
// unicast node: a rollback to multicast, or a lone node leaving), it sends
// one priority-0 advert, so that the multicast nodes take the VIPs over at
// once, as from any leaving master, rather than after their master-down
// interval.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	interval := r.interval
	r.mu.Unlock()
	tick := time.NewTicker(interval)
	defer tick.Stop()
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
		case <-tick.C:
		case <-r.kick:
		}
		r.relay()
	}
}

// relay sends one advert for every instance keepalived is MASTER of.
func (r *Relay) relay() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active {
		return
	}
	r.checkRestart()
	for name, a := range r.adverts {
		if !r.master[name] {
			continue
		}
		if err := r.sendLocked(a); err != nil {
			if !r.sendErr {
				r.log.Warn("multicast bridge: sending an advert failed; the multicast nodes may take the VIPs", "instance", name, "error", err)
				r.sendErr = true
			}
			continue
		}
		r.sendErr = false
		r.sent.Add(1)
	}
}

// goodbye sends the priority-0 adverts of Run's end; called with mu held.
func (r *Relay) goodbye() {
	if !r.active {
		return
	}
	for name, a := range r.adverts {
		if !r.master[name] || !r.alone[name] {
			continue
		}
		a.priority = 0
		if err := r.sendLocked(a); err != nil {
			r.log.Warn("multicast bridge: the goodbye advert failed; the multicast nodes take the VIPs after their master-down interval", "instance", name, "error", err)
			continue
		}
		r.sent.Add(1)
		r.log.Info("multicast bridge: sent the multicast nodes a priority-0 advert", "instance", name)
	}
}

func (r *Relay) sendLocked(a advert) error {
	v6 := a.vips[0].Is6()
	to := group4
	if v6 {
		to = group6
	}
	b, err := a.marshal(r.src4, to)
	if err != nil {
		return err
	}
	s := r.senders[v6]
	if s == nil {
		if s, err = r.open(r.iface, r.src4, v6); err != nil {
			return fmt.Errorf("opening the multicast socket on %s: %w (needs CAP_NET_RAW)", r.iface, err)
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
