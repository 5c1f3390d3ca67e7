package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/metrics"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/relay"
	"github.com/ipfailover/ipfailover/internal/splitbrain"
	"github.com/ipfailover/ipfailover/internal/supervisor"
	"github.com/ipfailover/ipfailover/iptables"
)

// run is the entrypoint: plan, prepare the host, supervise keepalived until
// ctx ends, then hand the VIPs over and release what is left. hup delivers
// SIGHUP.
func run(ctx context.Context, log *slog.Logger, hup <-chan os.Signal) error {
	for _, v := range config.UnknownVariables(os.Environ()) {
		log.Warn("unknown variable ignored", "variable", v)
	}
	nl, p, err := planHere()
	if err != nil {
		return err
	}
	defer nl.Close()
	// With the peers from the pods: publish this pod's address and list
	// the others before the host changes (and before keepalived starts, so
	// that the others list this pod well inside its master-down interval).
	var pods *podPeers
	if p.Config.PeersFromPods {
		if pods, err = startPodPeers(ctx, log, p.Config, p); err != nil {
			return err
		}
		members, _ := pods.members()
		if p, err = plan.New(p.Config, nl, members); err != nil {
			return err
		}
		pods.apply(p)
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
	chk, err := newPortCheck(p, log)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	checkCtx, stopChecking := context.WithCancel(context.WithoutCancel(ctx))
	defer stopChecking()
	wg.Go(func() { chk.run(checkCtx) })

	reaper := supervisor.NewReaper(log)
	reapCtx, stopReaping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReaping()
	go reaper.Run(reapCtx)

	binary := keepalived.FindBinary()
	sup := supervisor.New(supervisor.Options{
		Binary: binary,
		Args:   supervisor.Args(cfg.KeepalivedConfig, cfg.KeepalivedFlags),
		Stdout: os.Stdout, Stderr: os.Stderr,
		Logger: log,
		Reaper: reaper,
	})
	var bridge *relay.Relay
	if needsBridge(cfg) {
		bridge = relay.New(relay.Options{Plan: p, Keepalived: sup, Logger: log})
		bridge.SetActive(bridgeState(cfg, pods.unpublished()))
	}
	guardOpts := splitbrain.Options{Plan: p, Host: nl, Keepalived: sup, Logger: log}
	if bridge != nil {
		guardOpts.Notified = bridge.Note
	}
	guard, err := splitbrain.Open(guardOpts)
	if err != nil {
		return err
	}
	mo := metrics.Options{
		Address:          cfg.MetricsAddress,
		Plan:             p,
		Keepalived:       sup,
		KeepalivedBinary: binary,
		VIPs:             nl,
		SplitBrain:       guard,
		Version:          version,
		Check:            chk.metricsOrNil(),
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

	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() {
		if err := srv.ListenAndServe(serveCtx); err != nil {
			log.Error("metrics server stopped", "address", cfg.MetricsAddress, "error", err)
		}
	})
	// keepalived runs until ctx ends or the reloader stops it (the VRRP
	// interface moved). The helpers below end with keepalived's
	// supervision, whether that or a crash loop ended it.
	supCtx, stopSupervising := context.WithCancelCause(ctx)
	defer stopSupervising(nil)
	supervised, endSupervision := context.WithCancel(supCtx)
	wg.Go(func() {
		select {
		case <-sup.Started():
			srv.SetReady(true)
		case <-supervised.Done():
		}
	})
	rl := &reloader{log: log, nl: nl, sup: sup, chk: chk, guard: guard, relay: bridge, pods: pods, stop: stopSupervising, current: p}
	wg.Go(func() { rl.run(supervised, hup) })
	wg.Go(func() { guard.Run(supervised) })
	if bridge != nil {
		wg.Go(func() { bridge.Run(supervised) })
	}

	runErr := sup.Run(supCtx)
	endSupervision()
	stopChecking()
	srv.SetReady(false)

	// keepalived is gone: it removed its VIPs as it stopped, unless it died
	// hard. Release whatever is left so no other node's VIP stays here.
	if removed, err := host.ReleaseVIPs(nl, iface, cfg.VIPs); err != nil {
		log.Error("releasing VIPs", "interface", iface, "error", err)
	} else if len(removed) > 0 {
		log.Info("released VIPs keepalived left behind", "interface", iface, "vips", fmt.Sprint(removed))
	}
	stopServing()
	wg.Wait()
	if runErr != nil {
		return fmt.Errorf("keepalived: %w", runErr)
	}
	if cause := context.Cause(supCtx); errors.Is(cause, errInterfaceChanged) {
		return cause
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
