package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/metrics"
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
	guard, err := splitbrain.Open(splitbrain.Options{Plan: p, Host: nl, Keepalived: sup, Logger: log})
	if err != nil {
		return err
	}
	srv, err := metrics.New(metrics.Options{
		Address:          cfg.MetricsAddress,
		Plan:             p,
		Keepalived:       sup,
		KeepalivedBinary: binary,
		VIPs:             nl,
		SplitBrain:       guard,
		Version:          version,
		Check:            chk.metricsOrNil(),
		Logger:           log,
	})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() {
		if err := srv.ListenAndServe(serveCtx); err != nil {
			log.Error("metrics server stopped", "address", cfg.MetricsAddress, "error", err)
		}
	})
	// The helpers below end with keepalived's supervision, whether ctx
	// ended it or a crash loop did.
	supervised, endSupervision := context.WithCancel(ctx)
	wg.Go(func() {
		select {
		case <-sup.Started():
			srv.SetReady(true)
		case <-supervised.Done():
		}
	})
	wg.Go(func() { reloadOnSignal(supervised, log, hup, nl, sup, chk) })
	wg.Go(func() { guard.Run(supervised) })

	runErr := sup.Run(ctx)
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
	log.Info("stopped", "reason", context.Cause(ctx))
	return nil
}

// reloadOnSignal plans again on SIGHUP (the settings, which re-reads
// /etc/sysconfig/keepalived; the node's interface and addresses; the
// scripts), rewrites keepalived.conf, points the built-in check at the
// node's address and reloads keepalived. A plan that no longer validates
// is logged and the running configuration kept.
func reloadOnSignal(ctx context.Context, log *slog.Logger, hup <-chan os.Signal, nl *host.Netlink, sup *supervisor.Supervisor, chk *portCheck) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		p, err := planWith(nl)
		if err != nil {
			log.Error("reload refused, keeping the running configuration", "error", err)
			continue
		}
		if err := p.Write(); err != nil {
			log.Error("reload failed", "error", err)
			continue
		}
		chk.replan(p)
		if err := sup.Reload(); err != nil {
			log.Error("reload failed", "error", err)
			continue
		}
		log.Info("reloaded keepalived", "instances", len(p.Instances))
	}
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
