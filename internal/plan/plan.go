// Package plan derives everything ipfailover does on a node before it
// touches the host: the interface and the node's own addresses, checked
// scripts, the VRRP instances with their priorities and the keepalived.conf
// text. The node's facts come in through the small Facts interface, so
// planning is tested without root on a fake host.
package plan

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// Facts are what planning reads from the node. host.Netlink implements it;
// host/hosttest has an in-memory one.
type Facts interface {
	// DefaultInterface names the interface of the default route.
	DefaultInterface() (string, error)
	// Interface looks an interface up. The error of a missing one leaves
	// the name out, so that the caller can name the variable instead.
	Interface(name string) (net.Interface, error)
	// NodeAddrs returns the node's own IPv4 and IPv6 address on iface,
	// never one of vips; a family without one gives the zero Addr.
	NodeAddrs(iface string, vips []netip.Addr) (v4, v6 netip.Addr, err error)
}

// ConfigError is a problem with the settings or with what they name on the
// host (a missing interface or script). The program exits 2 for it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// IsConfigError says whether err is bad configuration (exit code 2).
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

// Plan is everything the program derives before it touches the host.
type Plan struct {
	Config *config.Config
	Node   config.Node
	// Fleet is what the workload's other pods publish, with
	// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods (zero otherwise).
	Fleet     Fleet
	Instances []config.Instance
	// Text is the keepalived.conf to write.
	Text []byte
}

// Fleet is what the workload's other pods publish, with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods.
type Fleet struct {
	// Members are the addresses of the other pods that speak this node's
	// VRRP: keepalived's unicast peers.
	Members []netip.Addr
	// VRRPv2 are the IPv4 addresses of the other pods that speak VRRPv2
	// (an older image): keepalived does not hear them nor they it, so they
	// are no peers of it, and the multicast bridge relays this node's
	// masters to them.
	VRRPv2 []netip.Addr
	// Heartbeats are the addresses among Members whose pods send the
	// split-brain guard's heartbeats (they publish what they speak): a
	// node that stops hearing them does not hear their VRRP.
	Heartbeats []netip.Addr
	// Unpublished names the pods of another template than this pod's
	// that publish no address: multicast nodes (the shipped image, or
	// multicast mode), to which the multicast bridge relays, or a
	// rollout's new pods, starting.
	Unpublished []string
}

// Equal says whether two fleets are the same.
func (f Fleet) Equal(o Fleet) bool {
	return slices.Equal(f.Members, o.Members) && slices.Equal(f.VRRPv2, o.VRRPv2) && slices.Equal(f.Heartbeats, o.Heartbeats) &&
		slices.Equal(f.Unpublished, o.Unpublished)
}

// New finds the node's facts for cfg, checks that the scripts it names can
// run, and computes the instances and keepalived.conf. fleet is, with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods, what the workload's other pods
// publish (ignored otherwise). Every problem the user can fix is a
// *ConfigError.
func New(cfg *config.Config, f Facts, fleet Fleet) (*Plan, error) {
	node, err := discover(cfg, f)
	if err != nil {
		return nil, err
	}
	if cfg.PeersFromPods {
		node.Members = fleet.Members
	} else {
		fleet = Fleet{}
	}
	if err := checkScripts(cfg); err != nil {
		return nil, &ConfigError{err}
	}
	ins, err := cfg.Instances(node)
	if err != nil {
		return nil, &ConfigError{err}
	}
	text, err := keepalived.Render(cfg, node, ins)
	if err != nil {
		return nil, err
	}
	return &Plan{Config: cfg, Node: node, Fleet: fleet, Instances: ins, Text: text}, nil
}

// Interface is the interface the VIPs live on: OPENSHIFT_HA_NETWORK_INTERFACE
// when it exists, else the interface of the default route.
func Interface(cfg *config.Config, f Facts) (string, error) {
	if cfg.Interface == "" {
		name, err := f.DefaultInterface()
		if err != nil {
			return "", &ConfigError{fmt.Errorf("OPENSHIFT_HA_NETWORK_INTERFACE is not set and %w; set it to the interface for the VIPs", err)}
		}
		return name, nil
	}
	if _, err := f.Interface(cfg.Interface); err != nil {
		return "", &ConfigError{fmt.Errorf("OPENSHIFT_HA_NETWORK_INTERFACE=%q: %w", cfg.Interface, err)}
	}
	return cfg.Interface, nil
}

// discover finds the interface and this node's own addresses on it.
func discover(cfg *config.Config, f Facts) (config.Node, error) {
	iface, err := Interface(cfg, f)
	if err != nil {
		return config.Node{}, err
	}
	node := config.Node{Interface: iface}
	v4, v6, err := f.NodeAddrs(iface, cfg.VIPs)
	if err != nil {
		return node, fmt.Errorf("reading the addresses of %s: %w", iface, err)
	}
	node.Addr4, node.Addr6 = v4, v6
	if !v4.IsValid() && !v6.IsValid() {
		return node, &ConfigError{fmt.Errorf("interface %s has no address of its own (only VIPs or none): VRRP needs one to send from", iface)}
	}
	return node, nil
}

// checkScripts makes sure the check and notify scripts exist and can run,
// as the pod sees its file system.
func checkScripts(cfg *config.Config) error {
	var errs []error
	for _, s := range []struct{ name, value string }{
		{"OPENSHIFT_HA_CHECK_SCRIPT", cfg.CheckScript},
		{"OPENSHIFT_HA_NOTIFY_SCRIPT", cfg.NotifyScript},
	} {
		if s.value == "" {
			continue
		}
		path := strings.Fields(s.value)[0]
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s=%q: %s does not exist in the pod (mount it, e.g. from a ConfigMap with defaultMode 0755)", s.name, s.value, path))
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s=%q: %s is not executable (give its ConfigMap defaultMode 0755)", s.name, s.value, path))
		}
	}
	return errors.Join(errs...)
}

// Write writes the keepalived.conf to KEEPALIVED_CONFIG atomically: a reader
// sees the old file or the new one, never half of one.
func (p *Plan) Write() error {
	path := p.Config.KeepalivedConfig
	if err := writeAtomically(path, p.Text); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func writeAtomically(path string, text []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".keepalived.conf-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(text)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Log logs the effective configuration: one log line, then the instances
// as a table on w.
func (p *Plan) Log(log *slog.Logger, w io.Writer) {
	c := p.Config
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %5s %8s %-6s %s\n", "instance", "vrid", "priority", "start", "vips")
	for _, in := range p.Instances {
		start := "BACKUP"
		if in.Master {
			start = "MASTER"
		}
		fmt.Fprintf(&b, "%-28s %5d %8d %-6s %s\n", in.Name, in.RouterID, in.Priority, start, joinAddrs(in.VIPs))
	}
	log.Info("effective configuration",
		"config_name", c.Name, "interface", p.Node.Interface,
		"node_ipv4", addrOrNone(p.Node.Addr4), "node_ipv6", addrOrNone(p.Node.Addr6),
		"vips", len(c.VIPs), "instances", len(p.Instances), "mode", p.Mode(),
		"check", p.checkDescription(), "preemption", c.Preemption.String(),
		"advert_interval", keepalived.AdvertInt(p.AdvertInterval()), "vrrp_version", p.VRRPVersion(), "config_file", c.KeepalivedConfig,
		"keepalived_flags", strings.Join(c.KeepalivedFlags, " "))
	fmt.Fprint(w, b.String())
}

// checkDescription says what decides that this node may hold VIPs, and
// how often it is asked.
func (p *Plan) checkDescription() string {
	c := p.Config
	switch c.Check {
	case config.CheckPort:
		return fmt.Sprintf("TCP connect to %s every %s (ipfailover)", c.CheckTarget(p.Node), c.CheckInterval)
	case config.CheckScript:
		return fmt.Sprintf("%s every %s (keepalived)", c.CheckScript, c.CheckInterval)
	}
	return "none (OPENSHIFT_HA_MONITOR_PORT=0)"
}

// AdvertInterval is the advert interval keepalived runs with.
func (p *Plan) AdvertInterval() time.Duration {
	interval, _ := p.Config.Adverts()
	return interval
}

// VRRPVersion is the VRRP version of the IPv4 instances (IPv6 ones speak
// VRRPv3).
func (p *Plan) VRRPVersion() int {
	if _, v3 := p.Config.Adverts(); v3 {
		return 3
	}
	return 2
}

// SourceAddrs are the addresses this node sends unicast VRRP from, one per
// family of the VIPs: what the pod publishes for the others to list with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods.
func (p *Plan) SourceAddrs() []netip.Addr { return p.Config.SourceAddrs(p.Node) }

// Mode is "unicast" or "multicast".
func (p *Plan) Mode() string {
	if p.Config.Unicast {
		return "unicast"
	}
	return "multicast"
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

func addrOrNone(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}
