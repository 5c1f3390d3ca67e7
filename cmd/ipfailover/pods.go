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
)

// podPeers are the unicast peers of OPENSHIFT_HA_UNICAST_PEERS_FROM=pods:
// the watch of the workload's pods, and what keepalived runs with now.
type podPeers struct {
	w *membership.Watcher

	mu         sync.Mutex
	applied    []netip.Addr
	lastChange time.Time
	// interval is the advert interval keepalived runs with;
	// followsFleet says that it follows the fleet.
	interval     time.Duration
	followsFleet bool
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
func startPodPeers(ctx context.Context, log *slog.Logger, cfg *config.Config, p *plan.Plan, group *component.Group) (*podPeers, error) {
	ns, err := podIdentity(cfg)
	if err != nil {
		return nil, err
	}
	client, err := membership.NewClient("ipfailover/" + version)
	if err != nil {
		return nil, &plan.ConfigError{Err: err}
	}
	w := membership.New(membership.Options{Client: client, Reconnect: client.CloseConnections, Namespace: ns, Pod: cfg.PodName, Logger: log, FastAdverts: cfg.FleetAdverts})
	log.Info("finding the unicast peers: the other pods of this pod's workload", "pod", cfg.PodName, "namespace", ns)
	if err := w.Prepare(ctx, p.SourceAddrs()); err != nil {
		return nil, fmt.Errorf("watching the workload's pods: %w", err)
	}
	group.Go("pod-watch", component.Auxiliary, w.Run)
	if err := w.Synced(ctx); err != nil {
		return nil, fmt.Errorf("watching the workload's pods: %w", err)
	}
	return &podPeers{w: w}, nil
}

// fleet is what the other pods publish now; ok is false when the watch
// does not show this pod itself, a view not to be trusted (the API server
// answering from a half-restored state, say).
func (pp *podPeers) fleet() (f plan.Fleet, ok bool) {
	v := pp.w.View()
	return plan.Fleet{Members: v.Peers(), Fast: v.Fast()}, slices.ContainsFunc(v.Members, func(m membership.Member) bool { return m.Self })
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
	pp.interval, pp.followsFleet = p.AdvertInterval(), p.Config.FleetAdverts
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
	s.AdvertInterval, s.FleetAdverts = pp.interval, pp.followsFleet
	pp.mu.Unlock()
	v := pp.w.View()
	s.SlowPods = len(v.Slow)
	for _, m := range v.Members {
		if m.In {
			s.In++
		} else {
			s.Out++
		}
	}
	return s
}

// bridgeState says whether the multicast bridge relays, and why, given the
// workload's pods that publish no address (with the peers from the pods).
func bridgeState(cfg *config.Config, unpublished []string) (bool, string) {
	switch {
	case cfg.MulticastBridge == config.BridgeOn:
		return true, "OPENSHIFT_HA_MULTICAST_BRIDGE=true"
	case cfg.MulticastBridge == config.BridgeOff:
		return false, "OPENSHIFT_HA_MULTICAST_BRIDGE=false"
	case !cfg.PeersFromPods:
		return false, "static unicast peers: set OPENSHIFT_HA_MULTICAST_BRIDGE=true to relay"
	case len(unpublished) > 0:
		return true, "pods of the workload publish no unicast address (an older image or multicast mode, or starting): " + strings.Join(unpublished, ", ")
	}
	return false, "every pod of the workload publishes its unicast address"
}

// unpublished are the pods of the workload that publish no address (nil
// without the peers from the pods).
func (pp *podPeers) unpublished() []string {
	if pp == nil {
		return nil
	}
	return pp.w.View().Unpublished()
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
		adverts := "-"
		if m.Fast {
			adverts = "fast"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Pod, addrList(m.Addrs), peer, conf, adverts, m.Why)
	}
	tw.Flush()
	fmt.Fprintf(w, "peers: %s\n", addrList(view.Peers()))
	if held := heldAddrs(view, listed); len(held) > 0 {
		fmt.Fprintf(w, "held: %s (listed, no pod of the workload has it: peers for %s after they leave, so that a pod coming back with one costs no reload)\n", addrList(held), membership.PeerHold)
	}
	fmt.Fprintln(w, advertsLine(cfg, view))
	if confErr != nil {
		fmt.Fprintf(w, "running keepalived.conf: %v\n", confErr)
	}
	if needsBridge(cfg) {
		on, why := bridgeState(cfg, view.Unpublished())
		state := "off"
		if on {
			state = "on"
		}
		fmt.Fprintf(w, "multicast bridge: %s (%s)\n", state, why)
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
// config.FastAdvertInterval, if it is: the fleet's instances would send
// more than config.FastAdvertRate adverts a second.
func rateBound(cfg *config.Config, interval time.Duration) string {
	if interval <= config.FastAdvertInterval {
		return ""
	}
	return fmt.Sprintf("; %d VRRP instances, at most %d adverts a second", len(cfg.Groups), config.FastAdvertRate)
}

// advertsLine says which adverts the fleet speaks by view, and why.
func advertsLine(cfg *config.Config, view membership.View) string {
	interval, v3 := cfg.Adverts(config.Node{FastAdverts: view.Fast()})
	version := 2
	if v3 {
		version = 3
	}
	line := fmt.Sprintf("adverts: every %s s, VRRPv%d for IPv4 (", keepalived.AdvertInt(interval), version)
	switch {
	case !cfg.FleetAdverts:
		return line + "OPENSHIFT_HA_ADVERT_INTERVAL)"
	case view.Fast():
		return line + "fast: every pod of the workload speaks them" + rateBound(cfg, interval) + ")"
	}
	var why []string
	for _, s := range view.Slow {
		why = append(why, s.Pod+" "+s.Why)
	}
	return line + "slow: " + strings.Join(why, "; ") + ")"
}
