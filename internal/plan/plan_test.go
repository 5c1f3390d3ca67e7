package plan_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/host/hosttest"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// The real facts come from netlink.
var _ plan.Facts = (*host.Netlink)(nil)

// node is a fake host with eth0 on the default route carrying addrs, and lo.
func node(addrs ...string) *hosttest.Addrs {
	var ps []netip.Prefix
	for _, a := range addrs {
		ps = append(ps, netip.MustParsePrefix(a))
	}
	h := hosttest.New(map[string][]netip.Prefix{"eth0": ps, "lo": {netip.MustParsePrefix("127.0.0.1/8")}})
	h.Default = "eth0"
	return h
}

func parse(t *testing.T, r config.Raw) *config.Config {
	t.Helper()
	cfg, err := config.Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPlanUsesTheNodesFacts(t *testing.T) {
	// The node holds one of its VIPs already (a killed earlier run): it
	// must not mistake it for its own address.
	h := node("192.0.2.100/32", "192.0.2.12/24", "2001:db8::12/64")
	p, err := plan.New(parse(t, config.Raw{VirtualIPs: "192.0.2.100-101"}), h, plan.Fleet{})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Node{Interface: "eth0", Addr4: netip.MustParseAddr("192.0.2.12"), Addr6: netip.MustParseAddr("2001:db8::12")}
	if diff := cmp.Diff(want, p.Node, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	if len(p.Instances) != 2 || p.Instances[0].Interface != "eth0" {
		t.Errorf("instances = %+v, want two on eth0", p.Instances)
	}
	if got := p.Config.CheckTarget(p.Node).String(); got != "192.0.2.12:80" {
		t.Errorf("the check probes %s, not the node's own address", got)
	}
	if !strings.Contains(string(p.Text), "ipfailover connects to 192.0.2.12:80 every 150ms") {
		t.Errorf("keepalived.conf does not say what the check probes:\n%s", p.Text)
	}
}

func TestPlanRefusesWhatTheHostLacks(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notify.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noDefault := node("192.0.2.12/24")
	noDefault.Default = ""
	for _, tt := range []struct {
		name string
		raw  config.Raw
		host *hosttest.Addrs
		msg  string
	}{
		{"missing interface", config.Raw{VirtualIPs: "192.0.2.100", Interface: "eth9"}, node("192.0.2.12/24"),
			`OPENSHIFT_HA_NETWORK_INTERFACE="eth9": no such interface on this host (have: eth0, lo)`},
		{"no default route", config.Raw{VirtualIPs: "192.0.2.100"}, noDefault,
			"OPENSHIFT_HA_NETWORK_INTERFACE is not set and no IPv4 or IPv6 default route in the main routing table; set it to the interface for the VIPs"},
		{"no address of its own", config.Raw{VirtualIPs: "192.0.2.100"}, node("192.0.2.100/24"),
			"interface eth0 has no address of its own (only VIPs or none): VRRP needs one to send from"},
		{"missing check script", config.Raw{VirtualIPs: "192.0.2.100", CheckScript: dir + "/nope.sh"}, node("192.0.2.12/24"),
			`OPENSHIFT_HA_CHECK_SCRIPT="` + dir + `/nope.sh": ` + dir + "/nope.sh does not exist in the pod"},
		{"notify not executable", config.Raw{VirtualIPs: "192.0.2.100", NotifyScript: notExec}, node("192.0.2.12/24"),
			"is not executable (give its ConfigMap defaultMode 0755)"},
		{"unicast v6 without a v6 address", config.Raw{VirtualIPs: "2001:db8::100", UnicastPeers: "2001:db8::11"}, node("192.0.2.12/24"),
			"interface eth0 has no IPv6 address of its own for the unicast IPv6 instance"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plan.New(parse(t, tt.raw), tt.host, plan.Fleet{})
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want an error with %q", err, tt.msg)
			}
			if !plan.IsConfigError(err) {
				t.Errorf("%v is not a configuration error (exit code 2)", err)
			}
		})
	}
}

func TestInterface(t *testing.T) {
	h := node("192.0.2.12/24")
	for _, tt := range []struct {
		set, want string
	}{{"", "eth0"}, {"lo", "lo"}} {
		got, err := plan.Interface(parse(t, config.Raw{VirtualIPs: "192.0.2.100", Interface: tt.set}), h)
		if err != nil || got != tt.want {
			t.Errorf("Interface with %q set = %q, %v; want %q", tt.set, got, err, tt.want)
		}
	}
}

// A failing listing of addresses is the host's fault, not the user's.
func TestPlanHostErrorIsNoConfigError(t *testing.T) {
	h := failingAddrs{node("192.0.2.12/24")}
	_, err := plan.New(parse(t, config.Raw{VirtualIPs: "192.0.2.100"}), h, plan.Fleet{})
	if err == nil || plan.IsConfigError(err) {
		t.Fatalf("got %v, want an error that is not a configuration error", err)
	}
}

type failingAddrs struct{ *hosttest.Addrs }

func (failingAddrs) NodeAddrs(string, []netip.Addr) (netip.Addr, netip.Addr, error) {
	return netip.Addr{}, netip.Addr{}, errors.New("netlink: no buffer space")
}

func TestWriteReplacesAtomically(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "keepalived.conf")
	for _, text := range []string{"first\n", "second\n"} {
		p := &plan.Plan{Config: &config.Config{KeepalivedConfig: path}, Text: []byte(text)}
		if err := p.Write(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != text {
			t.Fatalf("read %q, %v; want %q", got, err, text)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".keepalived.conf-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	p := &plan.Plan{Config: &config.Config{KeepalivedConfig: filepath.Join(path, "below-a-file")}}
	if err := p.Write(); err == nil || !strings.Contains(err.Error(), "writing "+path) {
		t.Errorf("writing below a file: %v, want an error naming the path", err)
	}
}
