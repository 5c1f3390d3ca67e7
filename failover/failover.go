// Package failover is what the ipfailover commands do, in order: read and
// validate the settings, learn the node's facts, then change the host
// (stale VIPs, firewall, keepalived.conf, keepalived) and undo it again.
// Nothing on the host changes before every setting and host fact checks out.
package failover

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/supervisor"
)

// ConfigError is a problem with the settings or with what they name on the
// host (a missing interface or script). The program exits 2 for it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Plan is everything the program derives before it touches the host.
type Plan struct {
	Config    *config.Config
	Node      config.Node
	Instances []config.Instance
	// Text is the keepalived.conf to write.
	Text []byte
	// Flags are the extra keepalived flags (KEEPALIVED_OPTIONS).
	Flags []string
}

// NewPlan reads the settings from the environment and the node's facts
// from nl, and computes the configuration. sysconfig is the content of
// /etc/sysconfig/keepalived ("" when absent).
func NewPlan(nl *host.Netlink, sysconfig string) (*Plan, error) {
	raw, err := config.FromEnv()
	if err != nil {
		return nil, &ConfigError{err}
	}
	return planFrom(raw, nl, sysconfig)
}

func planFrom(raw config.Raw, nl *host.Netlink, sysconfig string) (*Plan, error) {
	var problems []error
	cfg, err := config.Parse(raw)
	if err != nil {
		problems = append(problems, err)
	}
	flags, err := supervisor.ExtraFlags(raw.KeepalivedOpts, sysconfig)
	if err != nil {
		problems = append(problems, fmt.Errorf("KEEPALIVED_OPTIONS=%q: %w", raw.KeepalivedOpts, err))
	}
	if len(problems) > 0 {
		return nil, &ConfigError{errors.Join(problems...)}
	}
	node, err := discover(cfg, nl)
	if err != nil {
		return nil, err
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
	return &Plan{Config: cfg, Node: node, Instances: ins, Text: text, Flags: flags}, nil
}

// discover finds the interface and this node's own addresses on it.
func discover(cfg *config.Config, nl *host.Netlink) (config.Node, error) {
	node := config.Node{Interface: cfg.Interface}
	if node.Interface == "" {
		name, err := nl.DefaultInterface()
		if err != nil {
			return node, &ConfigError{fmt.Errorf("OPENSHIFT_HA_NETWORK_INTERFACE is not set and %w; set it to the interface for the VIPs", err)}
		}
		node.Interface = name
	} else if _, err := nl.Interface(node.Interface); err != nil {
		return node, &ConfigError{fmt.Errorf("OPENSHIFT_HA_NETWORK_INTERFACE=%q: %w", node.Interface, err)}
	}
	v4, v6, err := nl.NodeAddrs(node.Interface, cfg.VIPs)
	if err != nil {
		return node, fmt.Errorf("reading the addresses of %s: %w", node.Interface, err)
	}
	node.Addr4, node.Addr6 = v4, v6
	if !v4.IsValid() && !v6.IsValid() {
		return node, &ConfigError{fmt.Errorf("interface %s has no address of its own (only VIPs or none): VRRP needs one to send from", node.Interface)}
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

// WriteConfig writes text to path atomically: a reader sees the old file
// or the new one, never half of one.
func WriteConfig(path string, text []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, ".keepalived.conf-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(text); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// LogPlan logs the effective configuration: one log line, then the
// instances as a table on w.
func LogPlan(log *slog.Logger, w io.Writer, p *Plan) {
	c := p.Config
	mode := "multicast"
	if c.Unicast {
		mode = "unicast"
	}
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
		"vips", len(c.VIPs), "instances", len(p.Instances), "mode", mode,
		"check", c.Check.String(), "preemption", c.Preemption.String(),
		"advert_interval", keepalived.AdvertInt(c.AdvertInterval), "config_file", c.KeepalivedConfig,
		"keepalived_flags", strings.Join(p.Flags, " "))
	fmt.Fprint(w, b.String())
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

// UnknownVariables lists the OPENSHIFT_HA_* variables in env that the
// program does not read (typos), each with the closest known name.
func UnknownVariables(env []string) []string {
	known := config.Variables()
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OPENSHIFT_HA_") || slices.Contains(known, name) {
			continue
		}
		best, dist := "", 1<<30
		for _, k := range known {
			if d := editDistance(name, k); d < dist {
				best, dist = k, d
			}
		}
		if dist <= 4 {
			out = append(out, fmt.Sprintf("%s (did you mean %s?)", name, best))
		} else {
			out = append(out, name)
		}
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
