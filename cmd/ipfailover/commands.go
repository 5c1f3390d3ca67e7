package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/proc"
	"github.com/ipfailover/ipfailover/internal/supervisor"
	"github.com/ipfailover/ipfailover/iptables"
)

// render prints the keepalived.conf this node would run, and changes
// nothing. With the peers from the pods it lists the workload once.
func render(ctx context.Context, w io.Writer) error {
	nl, p, err := planHere()
	if err != nil {
		return err
	}
	defer nl.Close()
	switch {
	case p.Config.PeersFromPods && p.Config.PodName == "":
		// Outside a pod (a check before the first apply), there is no
		// pod to find the others from: the plan is a pod alone's.
		fmt.Fprintln(os.Stderr, "ipfailover render: POD_NAME is not set, so the other pods are not listed: this is keepalived.conf as a pod alone would run it (in a pod, render lists them)")
	case p.Config.PeersFromPods:
		view, _, err := lookAtPods(ctx, p.Config)
		if err != nil {
			return err
		}
		if p, err = plan.New(p.Config, nl, fleetOf(p.Config, view, nil)); err != nil {
			return err
		}
	}
	_, err = w.Write(p.Text)
	return err
}

// vrIDs prints the router ids an OpenShift on-prem IPI cluster uses for
// its API and Ingress VIPs.
func vrIDs(w io.Writer, cluster string) error {
	if cluster == "" {
		return &plan.ConfigError{Err: fmt.Errorf("vr-ids needs the cluster name (metadata.name of install-config)")}
	}
	api, ingress := config.OnPremRouterIDs(cluster)
	_, err := fmt.Fprintf(w, "APIVirtualRouterID: %d\nIngressVirtualRouterID: %d\nHA_EXCLUDED_VRRP_IDS=\"%d %d\"\n", api, ingress, api, ingress)
	return err
}

// removeFailover undoes what run changed on the host: stops a running
// keepalived, removes the firewall rule or table, releases the VIPs and
// unloads ip_vs when nothing uses it. It prints each step and is safe to
// run again.
func removeFailover(ctx context.Context, w io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	nl, err := host.NewNetlink()
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer nl.Close()
	iface, err := plan.Interface(cfg, nl)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "remove-failover: OpenShift IP Failover service terminating.")

	stopped, err := supervisor.StopExisting(proc.FS{}, keepalived.PIDFile, supervisor.DefaultStopTimeout)
	switch {
	case err != nil:
		fmt.Fprintf(w, "  - keepalived: %v\n", err)
	case stopped:
		fmt.Fprintln(w, "  - stopped keepalived")
	default:
		fmt.Fprintln(w, "  - keepalived is not running")
	}

	if opts := firewallOptions(cfg); opts.Chain != "" || opts.NFTables {
		// An earlier configuration may have had IPv6 VIPs: remove the
		// ip6tables rule whatever this one says.
		opts.IPv6 = true
		fw, err := iptables.New(opts)
		if err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
		ch, err := fw.Remove(ctx)
		if err != nil {
			return fmt.Errorf("firewall: %w", err)
		}
		for _, line := range append(append(ch.Removed, ch.Unchanged...), ch.Missing...) {
			fmt.Fprintf(w, "  - %s\n", line)
		}
	} else {
		fmt.Fprintln(w, "  - no firewall rule configured (OPENSHIFT_HA_IPTABLES_CHAIN and OPENSHIFT_HA_NFTABLES_RULE unset)")
	}

	removed, err := host.ReleaseVIPs(nl, iface, cfg.VIPs)
	for _, p := range removed {
		fmt.Fprintf(w, "  - released VIP %s from %s\n", p, iface)
	}
	if err != nil {
		return fmt.Errorf("releasing VIPs on %s: %w", iface, err)
	}
	if len(removed) == 0 {
		fmt.Fprintf(w, "  - no VIP of this configuration on %s\n", iface)
	}

	res, err := host.UnloadModuleIfUnused(ctx, "ip_vs")
	if err != nil {
		fmt.Fprintf(w, "  - ip_vs: %v\n", err)
	} else {
		fmt.Fprintf(w, "  - %s\n", res)
	}
	return nil
}
