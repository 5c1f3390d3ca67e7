package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/internal/metrics"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/relay"
)

// podPeers are the unicast peers of OPENSHIFT_HA_UNICAST_PEERS_FROM=pods:
// the watch of the workload's pods, what the wire says of them, and what
// keepalived runs with now.
type podPeers struct {
	w   *membership.Watcher
	cfg *config.Config
	// heardChanged gets a value when heard learns something new.
	heardChanged chan struct{}

	mu         sync.Mutex
	applied    []netip.Addr
	lastChange time.Time
	// interval and version are the adverts keepalived runs with.
	interval time.Duration
	version  int
	// heard are the VRRP versions the split-brain guard heard the
	// workload's pods speak where keepalived does not hear them (Heard),
	// with the pod that published the address then.
	heard map[netip.Addr]heardPod
	// vrrp2 counts the pods that speak VRRPv2, bridged, in the fleet last
	// applied.
	vrrp2 int
}

// podIdentity checks that this pod can find its peers: its name, its
// namespace, a way to the API server. Every problem is a config error, found
// before the host changes.
func podIdentity(cfg *config.Config) (namespace string, err error) {
	if err := cfg.CheckPodName(); err != nil {
		return "", &plan.ConfigError{Err: err}
	}
	ns, err := membership.Namespace(cfg.PodNamespace)
	if err != nil {
		return "", &plan.ConfigError{Err: err}
	}
	return ns, nil
}

// startPodPeers connects to the API server, publishes this pod's addresses
// (p's unicast sources), starts the watch of the workload in group and
// waits until it lists the workload; it keeps trying while the API server
// does not answer.
func startPodPeers(ctx context.Context, log *slog.Logger, cfg *config.Config, p *plan.Plan, client *membership.Client, group *component.Group) (*podPeers, error) {
	ns, err := podIdentity(cfg)
	if err != nil {
		return nil, err
	}
	w := membership.New(membership.Options{Client: client, Reconnect: client.CloseConnections, Namespace: ns, Pod: cfg.PodName, Logger: log, Adverts: speaks(cfg)})
	log.Info("finding the unicast peers: the other pods of this pod's workload", "pod", cfg.PodName, "namespace", ns)
	if err := w.Prepare(ctx, p.SourceAddrs()); err != nil {
		return nil, fmt.Errorf("watching the workload's pods: %w", err)
	}
	group.Go("pod-watch", component.Auxiliary, w.Run)
	if err := w.Synced(ctx); err != nil {
		return nil, fmt.Errorf("watching the workload's pods: %w", err)
	}
	return &podPeers{w: w, cfg: cfg, heardChanged: make(chan struct{}, 1), heard: map[netip.Addr]heardPod{}}, nil
}

// heardPod is what was heard from an address, and the pod that published
// it then ("" for none: an address held, or not in the view).
type heardPod struct {
	version int
	pod     string
}

// publisher names the pod that publishes a, or published it last if it is
// held; "" when no pod of view has it.
func publisher(view membership.View, a netip.Addr) string {
	for _, m := range view.Members {
		if slices.Contains(m.Addrs, a) {
			return m.Pod
		}
	}
	for _, h := range view.Held {
		if h.Addr == a {
			return h.Pod
		}
	}
	return ""
}

// speaks is the VRRP this pod's keepalived speaks, as it publishes it.
func speaks(cfg *config.Config) membership.Adverts {
	interval, v3 := cfg.Adverts()
	a := membership.Adverts{Version: 2, Interval: interval}
	if v3 {
		a.Version = 3
	}
	return a
}

// oldAdverts is what a pod that publishes its address alone (an older
// image, reading the same settings) speaks: config.Config.BridgeAdverts.
func oldAdverts(cfg *config.Config) membership.Adverts {
	interval, v3 := cfg.BridgeAdverts()
	a := membership.Adverts{Version: 2, Interval: interval}
	if v3 {
		a.Version = 3
	}
	return a
}

// fleetOf is the fleet of view: keepalived's peers are the addresses of
// the pods that speak its VRRP, VRRPv3; the pods that speak VRRPv2 get the
// bridge instead. heard is what the split-brain guard heard pods speak
// where keepalived does not hear them, and overrides what they publish. A
// held address (a pod that went) is a peer if its pod spoke VRRPv3, and
// nothing if it spoke VRRPv2.
func fleetOf(cfg *config.Config, view membership.View, heard map[netip.Addr]int) plan.Fleet {
	old := oldAdverts(cfg)
	published := view.VRRPv2(old)
	f := plan.Fleet{Unpublished: view.Unpublished()}
	for _, a := range view.Peers() {
		speaks := 3
		switch i := slices.IndexFunc(view.Held, func(h membership.Held) bool { return h.Addr == a }); {
		case heard[a] != 0:
			speaks = heard[a]
		case slices.Contains(published, a):
			speaks = 2
		case i >= 0 && a.Is4() && view.Held[i].Speaks(old).Version == 2:
			continue
		}
		switch {
		case speaks == 3 || a.Is6():
			f.Members = append(f.Members, a)
			if slices.ContainsFunc(view.Members, func(m membership.Member) bool { return m.Heartbeats && !m.Self && slices.Contains(m.Addrs, a) }) {
				f.Heartbeats = append(f.Heartbeats, a)
			}
		default:
			f.VRRPv2 = append(f.VRRPv2, a)
		}
	}
	return f
}

// fleet is what the other pods publish now, and what the wire says of
// them; ok is false when the watch does not show this pod itself, a view
// not to be trusted (the API server answering from a half-restored state,
// say).
func (pp *podPeers) fleet() (f plan.Fleet, ok bool) {
	v := pp.w.View()
	pp.mu.Lock()
	// What was heard is of the pod that published the address then: it
	// is forgotten when another pod publishes the address (a pod of
	// another image on the same node), or none does.
	heard := map[netip.Addr]int{}
	for a, h := range pp.heard {
		if p := publisher(v, a); p == "" || p != h.pod {
			delete(pp.heard, a)
			continue
		}
		heard[a] = h.version
	}
	pp.mu.Unlock()
	return fleetOf(pp.cfg, v, heard), slices.ContainsFunc(v.Members, func(m membership.Member) bool { return m.Self })
}

// Heard takes what the split-brain guard heard a pod of the workload
// speak where keepalived does not hear it (splitbrain.Options.Heard);
// something new replans (HeardChanged).
func (pp *podPeers) Heard(src netip.Addr, version int) {
	h := heardPod{version: version, pod: publisher(pp.w.View(), src)}
	pp.mu.Lock()
	was := pp.heard[src]
	pp.heard[src] = h
	pp.mu.Unlock()
	if was != h {
		select {
		case pp.heardChanged <- struct{}{}:
		default:
		}
	}
}

// applied records the peers keepalived now runs with.
func (pp *podPeers) apply(p *plan.Plan) (added, removed []netip.Addr) {
	now := peersOf(p)
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, a := range now {
		if !slices.Contains(pp.applied, a) {
			added = append(added, a)
		}
	}
	for _, a := range pp.applied {
		if !slices.Contains(now, a) {
			removed = append(removed, a)
		}
	}
	if pp.applied != nil && (len(added) > 0 || len(removed) > 0) {
		pp.lastChange = time.Now()
	}
	pp.applied = now
	pp.interval, pp.version, pp.vrrp2 = p.AdvertInterval(), p.VRRPVersion(), len(p.Fleet.VRRPv2)
	return added, removed
}

// peersOf lists the unicast peers of p's instances, each once, without
// the stand-in of a pod that is alone.
func peersOf(p *plan.Plan) []netip.Addr {
	out := []netip.Addr{}
	for _, in := range p.Instances {
		for _, a := range in.UnicastPeers {
			if !a.IsUnspecified() && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// MembershipStatus is what the metrics show.
func (pp *podPeers) MembershipStatus() metrics.MembershipStatus {
	h := pp.w.Health()
	s := metrics.MembershipStatus{Peers: map[string]int{}, WatchUp: h.Up, WatchErrors: h.Errors}
	pp.mu.Lock()
	for _, a := range pp.applied {
		if a.Is4() {
			s.Peers["ipv4"]++
		} else {
			s.Peers["ipv6"]++
		}
	}
	s.LastChange = pp.lastChange
	s.AdvertInterval, s.VRRPVersion, s.VRRPv2Pods = pp.interval, pp.version, pp.vrrp2
	pp.mu.Unlock()
	v := pp.w.View()
	for _, m := range v.Members {
		if m.In {
			s.In++
		} else {
			s.Out++
		}
	}
	return s
}

// bridgeListeners says who the multicast bridge relays to, and why, given
// the fleet (with the peers from the pods).
func bridgeListeners(cfg *config.Config, f plan.Fleet) relay.Listeners {
	switch {
	case cfg.MulticastBridge == config.BridgeOn:
		return relay.Listeners{Multicast: true, VRRPv2: f.VRRPv2, Why: "OPENSHIFT_HA_MULTICAST_BRIDGE=true"}
	case cfg.MulticastBridge == config.BridgeOff:
		return relay.Listeners{Why: "OPENSHIFT_HA_MULTICAST_BRIDGE=false"}
	case !cfg.PeersFromPods:
		return relay.Listeners{Why: "static unicast peers: set OPENSHIFT_HA_MULTICAST_BRIDGE=true to relay"}
	}
	l := relay.Listeners{Multicast: len(f.Unpublished) > 0, VRRPv2: f.VRRPv2}
	var why []string
	if l.Multicast {
		why = append(why, "pods of another template publish no unicast address (the shipped image or multicast mode, or starting): "+strings.Join(f.Unpublished, ", "))
	}
	if len(f.VRRPv2) > 0 {
		why = append(why, "pods speak VRRPv2 (an older image): "+addrList(f.VRRPv2))
	}
	if len(why) == 0 {
		why = append(why, "every pod of the workload speaks VRRPv3 with unicast peers")
	}
	l.Why = strings.Join(why, "; ")
	return l
}

// lookAtPods lists the workload's pods once (for render and peers).
func lookAtPods(ctx context.Context, cfg *config.Config) (membership.View, string, error) {
	ns, err := podIdentity(cfg)
	if err != nil {
		return membership.View{}, "", err
	}
	client, err := membership.NewClient("ipfailover/" + version)
	if err != nil {
		return membership.View{}, "", &plan.ConfigError{Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	view, sel, err := membership.Look(ctx, client, ns, cfg.PodName)
	if err != nil {
		return membership.View{}, "", err
	}
	return view, fmt.Sprintf("pods %s in namespace %s", sel, ns), nil
}

// peers prints the unicast peers this node finds and, with the peers from
// the pods, every pod of the workload with whether it is a peer, whether
// the running keepalived.conf lists it, and why.
func peers(ctx context.Context, w io.Writer) error {
	nl, p, err := planHere()
	if err != nil {
		return err
	}
	defer nl.Close()
	cfg := p.Config
	switch {
	case !cfg.Unicast:
		_, err := fmt.Fprintln(w, "multicast VRRP: no unicast peers (OPENSHIFT_HA_UNICAST_PEERS_FROM and OPENSHIFT_HA_UNICAST_PEERS are unset)")
		return err
	case !cfg.PeersFromPods:
		fmt.Fprintf(w, "static unicast peers (OPENSHIFT_HA_UNICAST_PEERS), this node's own address left out: %s\n", addrList(peersOf(p)))
		return nil
	}
	view, what, err := lookAtPods(ctx, cfg)
	if err != nil {
		return err
	}
	fleet := fleetOf(cfg, view, nil)
	old := oldAdverts(cfg)
	listed, confErr := runningPeers(cfg.KeepalivedConfig)
	fmt.Fprintf(w, "%s (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods):\n", what)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tADDRESSES\tPEER\tKEEPALIVED.CONF\tADVERTS\tWHY")
	for _, m := range view.Members {
		peer, conf := "out", "-"
		switch {
		case m.Self:
			peer = "self"
		case m.In:
			peer = "in"
		}
		if confErr == nil && !m.Self && len(m.Addrs) > 0 {
			conf = "not listed"
			if slices.ContainsFunc(m.Addrs, func(a netip.Addr) bool { return listed[a] }) {
				conf = "listed"
			}
		}
		adverts, why := "-", m.Why
		switch a := m.Speaks(old); {
		case m.Self:
			adverts = speaks(cfg).String()
		case a.Version != 0 && m.Adverts.Version == 0:
			adverts, why = a.String(), why+"; publishes its address alone: an older image, taken to speak what these settings give"
		case a.Version != 0:
			adverts = a.String()
		}
		if !m.Self && slices.ContainsFunc(m.Addrs, func(a netip.Addr) bool { return slices.Contains(fleet.VRRPv2, a) }) {
			peer, why = "bridged", why+"; speaks VRRPv2: no peer of keepalived, the multicast bridge relays this node's masters to it"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Pod, addrList(m.Addrs), peer, conf, strings.ReplaceAll(adverts, " ", "/"), why)
	}
	tw.Flush()
	fmt.Fprintf(w, "peers: %s\n", addrList(fleet.Members))
	if held := heldAddrs(view, listed); len(held) > 0 {
		fmt.Fprintf(w, "held: %s (listed, no pod of the workload has it: peers for %s after they leave, so that a pod coming back with one costs no reload)\n", addrList(held), membership.PeerHold)
	}
	fmt.Fprintln(w, advertsLine(cfg))
	if confErr != nil {
		fmt.Fprintf(w, "running keepalived.conf: %v\n", confErr)
	}
	if needsBridge(cfg) {
		l := bridgeListeners(cfg, fleet)
		state := "off"
		if l.Multicast || len(l.VRRPv2) > 0 {
			state = "on"
		}
		fmt.Fprintf(w, "multicast bridge: %s (%s)\n", state, l.Why)
	}
	return nil
}

// heldAddrs are the addresses the running keepalived.conf lists that no
// member of view has: addresses held after they left (membership.PeerHold).
func heldAddrs(view membership.View, listed map[netip.Addr]bool) []netip.Addr {
	var out []netip.Addr
	for a := range listed {
		if a.IsUnspecified() || slices.ContainsFunc(view.Members, func(m membership.Member) bool { return slices.Contains(m.Addrs, a) }) {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// runningPeers reads the unicast peers of the running keepalived.conf.
func runningPeers(path string) (map[netip.Addr]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := keepalived.Parse(b)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]bool{}
	for _, in := range c.Instances {
		for _, a := range in.UnicastPeers {
			out[a] = true
		}
	}
	return out, nil
}

func addrList(as []netip.Addr) string {
	if len(as) == 0 {
		return "none"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// rateBound says why the fast interval is longer than
// config.FastAdvertInterval, if it is: the instances would send more than
// config.FastAdvertRate adverts a second.
func rateBound(cfg *config.Config, interval time.Duration) string {
	if interval <= config.FastAdvertInterval {
		return ""
	}
	return fmt.Sprintf("; %d VRRP instances, at most %d adverts a second", len(cfg.Groups), config.FastAdvertRate)
}

// advertsLine says which adverts keepalived speaks, and why.
func advertsLine(cfg *config.Config) string {
	interval, v3 := cfg.Adverts()
	version := 2
	if v3 {
		version = 3
	}
	return fmt.Sprintf("adverts: every %s s, VRRPv%d for IPv4 (%s)", keepalived.AdvertInt(interval), version, advertsWhy(cfg, interval))
}

// advertsWhy says why keepalived speaks the adverts it does.
func advertsWhy(cfg *config.Config, interval time.Duration) string {
	switch {
	case cfg.PeersFromPods && cfg.AdvertIntervalSet:
		return "OPENSHIFT_HA_ADVERT_INTERVAL; VRRPv3, as every pod that follows the pods"
	case cfg.PeersFromPods:
		return "the fast interval of the peers from the pods" + rateBound(cfg, interval)
	case cfg.AdvertIntervalSet:
		return "OPENSHIFT_HA_ADVERT_INTERVAL"
	}
	return "the default without the peers from the pods: what the shipped image speaks"
}
