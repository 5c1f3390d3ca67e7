package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/internal/metrics"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/relay"
	"github.com/ipfailover/ipfailover/internal/splitbrain"
	"github.com/ipfailover/ipfailover/internal/supervisor"
	"github.com/ipfailover/ipfailover/iptables"
)

// run is the entrypoint: plan, prepare the host, supervise keepalived until
// ctx ends or a component fails, then hand the VIPs over and release what
// is left. hup delivers SIGHUP.
//
// run is the composition root and owns every goroutine of the program (see
// internal/component): in start order the reaper, the watch of the
// workload's pods, the built-in check, the metrics server, the FAULT
// reminder, the multicast bridge, the split-brain guard and the reloader,
// and in the foreground keepalived's supervision. They stop in the reverse
// order once keepalived has stopped, and before the VIPs left on the
// interface are released.
func run(ctx context.Context, log *slog.Logger, hup <-chan os.Signal) error {
	for _, v := range config.UnknownVariables(os.Environ()) {
		log.Warn("unknown variable ignored", "variable", v)
	}
	nl, p, err := planHere()
	if err != nil {
		return err
	}
	defer nl.Close()
	// keepalived runs until ctx ends or an essential component fails
	// (the reloader among them, when the VRRP interface moved).
	supCtx, endSupervision := context.WithCancelCause(ctx)
	defer endSupervision(nil)
	group := component.New(log, endSupervision)
	defer group.Stop()

	reaper := supervisor.NewReaper(log)
	group.Go("reaper", component.Essential, reaper.Run)
	// The metrics port is taken before the host changes: a port in use
	// ends the run here, not after keepalived started. Until the metrics
	// server runs, it answers the kubelet's probes: alive, not ready.
	var metricsLn net.Listener
	var starting *metrics.Starting
	if p.Config.MetricsAddress != "" {
		if metricsLn, err = net.Listen("tcp", p.Config.MetricsAddress); err != nil {
			return fmt.Errorf("metrics: listening on %s (OPENSHIFT_HA_METRICS_ADDRESS): %w", p.Config.MetricsAddress, err)
		}
		defer metricsLn.Close()
		waiting := "starting"
		if p.Config.PeersFromPods {
			waiting = "publishing this pod's address and listing the workload's pods (the API server)"
		}
		if starting, err = metrics.ServeStarting(metricsLn, func() string { return waiting }); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		defer starting.Stop()
	}
	// In a pod with its service account, the API server: the peers from
	// the pods need it, the Events use it when it is there.
	api, apiErr := membership.NewClient("ipfailover/" + version)
	if p.Config.PeersFromPods {
		if _, err := podIdentity(p.Config); err != nil {
			return err
		}
		if apiErr != nil {
			return &plan.ConfigError{Err: apiErr}
		}
	}
	events := startEvents(log, p.Config, api, group)
	// With the peers from the pods: publish this pod's address and list
	// the others before the host changes (and before keepalived starts, so
	// that the others list this pod well inside its master-down interval).
	var pods *podPeers
	if p.Config.PeersFromPods {
		if pods, err = startPodPeers(ctx, log, p.Config, p, api, group); err != nil {
			return err
		}
		events.followPods(pods)
		fleet, _ := pods.fleet()
		if p, err = plan.New(p.Config, nl, fleet); err != nil {
			return err
		}
		pods.apply(p)
		logAdverts(log, p)
	}
	p.Log(log, os.Stderr)
	cfg, iface := p.Config, p.Node.Interface

	// The host changes from here on.
	if res, err := host.LoadModule(ctx, "ip_vs"); err != nil {
		log.Warn("ip_vs not loaded; keepalived runs without it", "error", err)
	} else {
		log.Info("ip_vs", "result", res.String())
	}
	if removed, err := host.ReleaseVIPs(nl, iface, cfg.VIPs); err != nil {
		return fmt.Errorf("removing VIPs left by an earlier run: %w", err)
	} else if len(removed) > 0 {
		log.Info("removed VIPs left on the interface by an earlier run", "interface", iface, "vips", fmt.Sprint(removed))
	}
	if err := ensureFirewall(ctx, log, cfg); err != nil {
		return err
	}
	if err := p.Write(); err != nil {
		return err
	}
	log.Info("wrote keepalived configuration", "path", cfg.KeepalivedConfig, "bytes", len(p.Text))
	chk, err := newPortCheck(p, log, events)
	if err != nil {
		return err
	}
	if chk != nil {
		group.Go("check", component.Essential, chk.checker.Run)
	}

	binary := keepalived.FindBinary()
	sup := supervisor.New(supervisor.Options{
		Binary: binary,
		Args:   supervisor.Args(cfg.KeepalivedConfig, cfg.KeepalivedFlags, supervisor.HasSyslog(supervisor.SyslogSocket)),
		Stdout: os.Stdout, Stderr: os.Stderr,
		Logger: log,
		Reaper: reaper,
		Died:   events.died,
	})
	var bridge *relay.Relay
	if needsBridge(cfg) {
		bridge = relay.New(relay.Options{Plan: p, Keepalived: sup, Logger: log})
		bridge.SetListeners(bridgeListeners(cfg, p.Fleet))
	}
	takeovers := metrics.NewTakeoverMetrics()
	guardOpts := splitbrain.Options{
		Plan: p, Host: nl, Keepalived: sup, Logger: log,
		Took:       func(t splitbrain.Takeover) { takeovers.Took(t); events.took(t) },
		Released:   func(r splitbrain.Release) { takeovers.Released(r); events.released(r) },
		Duplicated: events.duplicated,
	}
	if bridge != nil {
		guardOpts.Notified = bridge.Note
	}
	if pods != nil {
		guardOpts.Heard = func(src netip.Addr, version int, interval time.Duration) {
			// The bridge speaks to a VRRPv2 speaker at once; the next
			// plan makes it a listener, or a VRRPv3 one a peer.
			if version == 2 && bridge != nil {
				bridge.Heard(src, interval)
			}
			pods.Heard(src, version)
		}
	}
	guard, err := splitbrain.Open(guardOpts)
	if err != nil {
		return err
	}
	defer guard.Close()
	mo := metrics.Options{
		Plan:             p,
		Keepalived:       sup,
		KeepalivedBinary: binary,
		VIPs:             nl,
		SplitBrain:       guard,
		Version:          version,
		Check:            chk.metricsOrNil(),
		Takeovers:        takeovers,
		Components:       group.Health,
		AddrWatch:        nl,
		Logger:           log,
	}
	if pods != nil {
		mo.Membership = pods
	}
	if bridge != nil {
		mo.Bridge = bridge
	}
	srv, err := metrics.New(mo)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if metricsLn != nil {
		starting.Stop()
		group.Go("metrics", component.Essential, func(ctx context.Context) error { return srv.Serve(ctx, metricsLn) })
	}
	group.Go("fault-reminder", component.Auxiliary, srv.RemindFaults)
	if bridge != nil {
		group.Go("multicast-bridge", component.Auxiliary, bridge.Run)
	}
	group.Go("split-brain-guard", component.Auxiliary, guard.Run)
	rl := &reloader{log: log, nl: nl, sup: sup, chk: chk, guard: guard, relay: bridge, pods: pods, events: events, current: p}
	group.Go("reloader", component.Essential, func(ctx context.Context) error { return rl.run(ctx, hup) })

	// Ready once keepalived runs its instances (the metrics server looks).
	// A component that failed already ends the run before keepalived
	// starts.
	srv.SetReady(true)
	var runErr error
	if supCtx.Err() == nil {
		runErr = sup.Run(supCtx)
	}
	srv.SetReady(false)
	group.Stop()

	// keepalived is gone: it removed its VIPs as it stopped, unless it died
	// hard. Release whatever is left so no other node's VIP stays here.
	if removed, err := host.ReleaseVIPs(nl, iface, cfg.VIPs); err != nil {
		log.Error("releasing VIPs", "interface", iface, "error", err)
	} else if len(removed) > 0 {
		log.Info("released VIPs keepalived left behind", "interface", iface, "vips", fmt.Sprint(removed))
	}
	if runErr != nil {
		return fmt.Errorf("keepalived: %w", runErr)
	}
	if err := group.Failed(); err != nil {
		return err
	}
	log.Info("stopped", "reason", context.Cause(ctx))
	return nil
}

// needsBridge says whether the multicast bridge may ever relay: unicast,
// and either forced on or automatic with the peers from the pods.
func needsBridge(cfg *config.Config) bool {
	switch cfg.MulticastBridge {
	case config.BridgeOn:
		return true
	case config.BridgeAuto:
		return cfg.PeersFromPods
	}
	return false
}

func ensureFirewall(ctx context.Context, log *slog.Logger, cfg *config.Config) error {
	opts := firewallOptions(cfg)
	if opts.Chain == "" && !opts.NFTables {
		return nil
	}
	fw, err := iptables.New(opts)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	ch, err := fw.Ensure(ctx)
	if err != nil {
		return fmt.Errorf("firewall: %w", err)
	}
	if len(ch.Missing) > 0 {
		log.Warn("firewall chain does not exist; no rule added, VRRP must be allowed another way", "chain", cfg.IPTablesChain, "missing", ch.Missing)
	}
	log.Info("firewall", "changes", ch)
	return nil
}

func firewallOptions(cfg *config.Config) iptables.Options {
	o := iptables.Options{Chain: cfg.IPTablesChain, NFTables: cfg.NFTables}
	for _, v := range cfg.VIPs {
		o.IPv6 = o.IPv6 || v.Is6()
	}
	return o
}
