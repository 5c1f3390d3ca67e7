package failover

import (
	"context"
	"fmt"
	"io"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/supervisor"
	"github.com/ipfailover/ipfailover/iptables"
)

// Render prints the keepalived.conf this node would run, and changes
// nothing.
func Render(w io.Writer) error {
	nl, p, err := planHere()
	if err != nil {
		return err
	}
	defer nl.Close()
	_, err = w.Write(p.Text)
	return err
}

// planHere plans for the current network namespace. The caller closes the
// Netlink.
func planHere() (*host.Netlink, *Plan, error) {
	nl, err := host.NewNetlink()
	if err != nil {
		return nil, nil, fmt.Errorf("opening netlink: %w", err)
	}
	p, err := NewPlan(nl, readSysconfig())
	if err != nil {
		nl.Close()
		return nil, nil, err
	}
	return nl, p, nil
}

// VRIDs prints the router ids an OpenShift on-prem IPI cluster uses for
// its API and Ingress VIPs.
func VRIDs(w io.Writer, cluster string) error {
	if cluster == "" {
		return &ConfigError{fmt.Errorf("vr-ids needs the cluster name (metadata.name of install-config)")}
	}
	api, ingress := config.OnPremRouterIDs(cluster)
	_, err := fmt.Fprintf(w, "APIVirtualRouterID: %d\nIngressVirtualRouterID: %d\nHA_EXCLUDED_VRRP_IDS=\"%d %d\"\n", api, ingress, api, ingress)
	return err
}

// RemoveFailover undoes what Run changed on the host: stops a running
// keepalived, removes the firewall rule or table, releases the VIPs and
// unloads ip_vs when nothing uses it. It prints each step and is safe to
// run again.
func RemoveFailover(ctx context.Context, w io.Writer) error {
	raw, err := config.FromEnv()
	if err != nil {
		return &ConfigError{err}
	}
	cfg, err := config.Parse(raw)
	if err != nil {
		return &ConfigError{err}
	}
	nl, err := host.NewNetlink()
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer nl.Close()
	iface := cfg.Interface
	if iface == "" {
		if iface, err = nl.DefaultInterface(); err != nil {
			return &ConfigError{fmt.Errorf("OPENSHIFT_HA_NETWORK_INTERFACE is not set and %w", err)}
		}
	} else if _, err := nl.Interface(iface); err != nil {
		return &ConfigError{fmt.Errorf("OPENSHIFT_HA_NETWORK_INTERFACE=%q: %w", iface, err)}
	}
	fmt.Fprintln(w, "remove-failover: OpenShift IP Failover service terminating.")

	stopped, err := supervisor.StopExisting(supervisor.DefaultPIDFile, supervisor.DefaultStopTimeout)
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
