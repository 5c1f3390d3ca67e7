package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/relay"
	"github.com/ipfailover/ipfailover/internal/splitbrain"
	"github.com/ipfailover/ipfailover/internal/supervisor"
)

// errInterfaceChanged ends a run whose VRRP interface moved (the
// interface of the default route changed, with OPENSHIFT_HA_NETWORK_INTERFACE
// unset), in every mode: keepalived hands its VIPs over, the VIPs left on
// the old interface are released, and the restarted container starts on
// the new interface, with the split-brain guard, the metrics and the
// release of VIPs there too.
var errInterfaceChanged = errors.New("the VRRP interface changed")

// settle is how long the reloader waits after an address change for more
// of them (keepalived adding VIPs, an address moving between interfaces);
// maxSettle bounds the wait on a host whose addresses never stop changing
// (thousands of pods starting), and a change of the pods ends it at once:
// the reload reads the addresses as they are then.
const (
	settle    = 100 * time.Millisecond
	maxSettle = time.Second
)

// publishWait bounds how long a reload waits to publish a new address
// while the API server does not answer; keepalived then runs the new plan
// anyway, since the old source address is gone.
const publishWait = 5 * time.Second

// reloader plans again and reloads keepalived: on SIGHUP, and with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods when the workload's pods or this
// node's addresses change.
type reloader struct {
	log   *slog.Logger
	nl    *host.Netlink
	sup   *supervisor.Supervisor
	chk   *portCheck
	guard *splitbrain.Guard
	relay *relay.Relay // nil without the multicast bridge
	pods  *podPeers    // nil unless the peers come from the pods
	// events records the fleet's adverts changing (nil: none).
	events *operatorEvents

	current *plan.Plan
}

// run reloads until ctx ends (nil) or the VRRP interface moved
// (errInterfaceChanged).
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) error {
	var peers, heard <-chan struct{}
	var addrs chan struct{}
	if r.pods != nil {
		peers, heard = r.pods.w.Changes(), r.pods.heardChanged
		// The address watch lives as long as this loop.
		addrs = make(chan struct{}, 1)
		watchCtx, stopWatching := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() {
			watched <- component.Safe("the address watch", func() error { return r.nl.WatchAddrs(watchCtx, "", addrs) })
		}()
		defer func() {
			stopWatching()
			if err := <-watched; err != nil {
				r.log.Error("the address watch failed", "error", err)
			}
		}()
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			err = r.reload(ctx, "SIGHUP", true)
		case <-peers:
			err = r.reload(ctx, "the workload's pods changed", false)
		case <-heard:
			err = r.reload(ctx, "a pod of the workload was heard speaking VRRP keepalived does not hear", false)
		case <-addrs:
			why, ok := r.settle(ctx, addrs, peers, heard)
			if !ok {
				return nil
			}
			err = r.reload(ctx, why, false)
		}
		if err != nil {
			return err
		}
	}
}

// settle lets a burst of address changes end (settle without one, at most
// maxSettle), and reports why to reload: a change of the workload's pods
// or what was heard of them ends the wait at once. ok is false when ctx
// ended.
func (r *reloader) settle(ctx context.Context, addrs, peers, heard <-chan struct{}) (why string, ok bool) {
	quiet := time.NewTimer(settle)
	defer quiet.Stop()
	bound := time.NewTimer(maxSettle)
	defer bound.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", false
		case <-addrs:
			quiet.Reset(settle)
		case <-quiet.C:
			return "this node's addresses changed", true
		case <-bound.C:
			return "this node's addresses changed (still changing)", true
		case <-peers:
			return "the workload's pods and this node's addresses changed", true
		case <-heard:
			return "a pod of the workload was heard speaking VRRP keepalived does not hear, and this node's addresses changed", true
		}
	}
}

// reload plans again (the settings, which re-reads /etc/sysconfig/keepalived;
// the node's interface and addresses; the scripts; the peers) and, when
// the plan differs or force is set, rewrites keepalived.conf, points the
// built-in check, the split-brain guard and the bridge at the new plan and
// reloads keepalived. A plan that no longer validates is logged and the
// running configuration kept. A VRRP interface that moved is
// errInterfaceChanged.
func (r *reloader) reload(ctx context.Context, why string, force bool) error {
	var fleet plan.Fleet
	if r.pods != nil {
		var ok bool
		if fleet, ok = r.pods.fleet(); !ok {
			r.log.Warn("the watch does not show this pod: keeping the running peers", "reason", why, "peers", fmt.Sprint(peersOf(r.current)))
			fleet = r.current.Fleet
		}
	}
	p, err := planWith(r.nl, fleet)
	if err != nil {
		r.log.Error("reload refused, keeping the running configuration", "reason", why, "error", err)
		return nil
	}
	if p.Node.Interface != r.current.Node.Interface {
		r.log.Warn("the VRRP interface changed: stopping keepalived (its VIPs are handed over) so that the pod starts again on the new one",
			"from", r.current.Node.Interface, "to", p.Node.Interface)
		return fmt.Errorf("%w from %s to %s", errInterfaceChanged, r.current.Node.Interface, p.Node.Interface)
	}
	renumbered := r.pods != nil && !slices.Equal(p.SourceAddrs(), r.current.SourceAddrs())
	if r.relay != nil {
		r.relay.SetListeners(bridgeListeners(p.Config, p.Fleet))
	}
	if renumbered {
		r.publish(ctx, p.SourceAddrs())
	}
	switch {
	case force || !bytes.Equal(p.Text, r.current.Text):
		r.apply(p, why)
	case !p.Fleet.Equal(r.current.Fleet):
		// The same keepalived.conf, other pods outside it (VRRPv2 pods,
		// multicast nodes): the guard and the bridge take them in.
		r.replan(p)
		r.current = p
		r.pods.apply(p)
	}
	return nil
}

// othersReload is how long a renumbered node lets the others reload for
// its newly published address before it reloads keepalived itself. Its
// keepalived then ends the instances whose source address changed with a
// priority-0 advert from the former address, which the others still list
// (membership.PeerHold) and hear, their own reloads (which reopen their
// sockets) being over; and its new instances, which start as backups, hear
// the others' adverts at once, sent to the new address already. Reloading
// first, its new instances would hear nobody until the others listed the
// new address, and at the fast adverts (a master-down interval of 0.6 s)
// take every VIP meanwhile. keepalived keeps sending from the former
// address until it reloads.
const othersReload = 250 * time.Millisecond

// publish publishes this node's new source addresses over new connections
// (the open ones leave from an address the node may no longer have) and
// gives the others othersReload to list them.
func (r *reloader) publish(ctx context.Context, src []netip.Addr) {
	pctx, cancel := context.WithTimeout(ctx, publishWait)
	err := r.pods.w.Renumbered(pctx, src)
	cancel()
	if err != nil {
		r.log.Warn("this node's new address is not published yet; keepalived sends from it anyway", "addresses", fmt.Sprint(src), "error", err)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(othersReload):
	}
}

// apply writes p, points the built-in check, the split-brain guard and the
// bridge at it, and reloads keepalived; it reports whether keepalived runs p.
func (r *reloader) apply(p *plan.Plan, why string) bool {
	if err := p.Write(); err != nil {
		r.log.Error("reload failed", "reason", why, "error", err)
		return false
	}
	r.replan(p)
	switch err := r.sup.Reload(); {
	case errors.Is(err, supervisor.ErrNotRunning):
		// keepalived is being restarted: it reads the new file at its start.
	case err != nil:
		r.log.Error("reload failed", "reason", why, "error", err)
		return false
	}
	if p.AdvertInterval() != r.current.AdvertInterval() || p.VRRPVersion() != r.current.VRRPVersion() {
		logAdverts(r.log, p)
		r.events.adverts(p)
	}
	r.current = p
	attrs := []any{"reason", why, "instances", len(p.Instances)}
	if r.pods != nil {
		added, removed := r.pods.apply(p)
		attrs = append(attrs, "peers", fmt.Sprint(peersOf(p)), "added", fmt.Sprint(added), "removed", fmt.Sprint(removed))
	}
	r.log.Info("reloaded keepalived", attrs...)
	return true
}

// replan points the built-in check, the split-brain guard and the bridge
// at p.
func (r *reloader) replan(p *plan.Plan) {
	r.chk.replan(p)
	r.guard.Replan(p)
	if r.relay != nil {
		r.relay.Replan(p)
	}
}

// logAdverts says which adverts keepalived speaks with p, and why.
func logAdverts(log *slog.Logger, p *plan.Plan) {
	log.Info("adverts", "advert_interval", keepalived.AdvertInt(p.AdvertInterval()), "vrrp_version", p.VRRPVersion(),
		"why", advertsWhy(p.Config, p.AdvertInterval()))
}
