package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/metrics"
	"github.com/ipfailover/ipfailover/internal/supervisor"
	"github.com/ipfailover/ipfailover/iptables"
)

// Options are what the commands need from main.
type Options struct {
	Logger *slog.Logger
	// Stdout and Stderr get keepalived's output unchanged, and the
	// commands' own output.
	Stdout, Stderr io.Writer
	Version        string
	// Reload delivers SIGHUP.
	Reload <-chan os.Signal
}

// Run is the entrypoint: plan, prepare the host, supervise keepalived until
// ctx ends, then hand the VIPs over and release what is left.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	for _, v := range UnknownVariables(os.Environ()) {
		log.Warn("unknown variable ignored", "variable", v)
	}
	nl, p, err := planHere()
	if err != nil {
		return err
	}
	defer nl.Close()
	LogPlan(log, o.Stderr, p)
	cfg := p.Config

	// The host changes from here on.
	if res, err := host.LoadModule(ctx, "ip_vs"); err != nil {
		log.Warn("ip_vs not loaded; keepalived runs without it", "error", err)
	} else {
		log.Info("ip_vs", "result", res.String())
	}
	if removed, err := host.ReleaseVIPs(nl, p.Node.Interface, cfg.VIPs); err != nil {
		return fmt.Errorf("removing VIPs left by an earlier run: %w", err)
	} else if len(removed) > 0 {
		log.Info("removed VIPs left on the interface by an earlier run", "interface", p.Node.Interface, "vips", fmt.Sprint(removed))
	}
	if err := ensureFirewall(ctx, log, cfg); err != nil {
		return err
	}
	if err := WriteConfig(cfg.KeepalivedConfig, p.Text); err != nil {
		return err
	}
	log.Info("wrote keepalived configuration", "path", cfg.KeepalivedConfig, "bytes", len(p.Text))

	reaper := supervisor.NewReaper(log)
	reapCtx, stopReaping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReaping()
	go reaper.Run(reapCtx)

	sup := supervisor.New(supervisor.Options{
		Binary: keepalivedBinary(),
		Args:   supervisor.Args(cfg.KeepalivedConfig, p.Flags),
		Stdout: o.Stdout, Stderr: o.Stderr,
		Logger: log,
		Reaper: reaper,
	})
	srv, err := metrics.New(metrics.Options{
		Address:          cfg.MetricsAddress,
		Keepalived:       sup,
		VIPs:             nl,
		ConfigName:       cfg.Name,
		Interface:        p.Node.Interface,
		Instances:        metricInstances(p.Instances),
		Unicast:          cfg.Unicast,
		Preemption:       cfg.Preemption.String(),
		Version:          o.Version,
		KeepalivedBinary: keepalivedBinary(),
		Logger:           log,
	})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	var wg sync.WaitGroup
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
	wg.Go(func() { reloadOnSignal(supervised, log, o.Reload, nl, sup) })

	runErr := sup.Run(ctx)
	endSupervision()
	srv.SetReady(false)

	// keepalived is gone: it removed its VIPs as it stopped, unless it died
	// hard. Release whatever is left so no other node's VIP stays here.
	if removed, err := host.ReleaseVIPs(nl, p.Node.Interface, cfg.VIPs); err != nil {
		log.Error("releasing VIPs", "interface", p.Node.Interface, "error", err)
	} else if len(removed) > 0 {
		log.Info("released VIPs keepalived left behind", "interface", p.Node.Interface, "vips", fmt.Sprint(removed))
	}
	stopServing()
	wg.Wait()
	if runErr != nil {
		return fmt.Errorf("keepalived: %w", runErr)
	}
	log.Info("stopped", "reason", context.Cause(ctx))
	return nil
}

// reloadOnSignal re-renders the configuration on SIGHUP and reloads
// keepalived. A configuration that no longer validates is logged and the
// running one kept.
func reloadOnSignal(ctx context.Context, log *slog.Logger, hup <-chan os.Signal, nl *host.Netlink, sup *supervisor.Supervisor) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		p, err := NewPlan(nl, readSysconfig())
		if err != nil {
			log.Error("reload refused, keeping the running configuration", "error", err)
			continue
		}
		if err := WriteConfig(p.Config.KeepalivedConfig, p.Text); err != nil {
			log.Error("reload failed", "error", err)
			continue
		}
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

func metricInstances(ins []config.Instance) []metrics.Instance {
	out := make([]metrics.Instance, len(ins))
	for i, in := range ins {
		out[i] = metrics.Instance{Name: in.Name, Interface: in.Interface, VRID: int(in.RouterID), VIPs: in.VIPs, Priority: in.Priority}
	}
	return out
}

func keepalivedBinary() string {
	if p, err := exec.LookPath("keepalived"); err == nil {
		return p
	}
	return supervisor.DefaultBinary
}

func readSysconfig() string {
	b, err := os.ReadFile(supervisor.SysconfigPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// IsConfigError says whether err is bad configuration (exit code 2).
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}
