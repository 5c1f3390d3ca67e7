package failover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/test/nstest"
)

// testNetlink makes a network namespace with a veth eth0 carrying addrs
// and a default route, and returns a Netlink bound to it.
func testNetlink(t *testing.T, addrs ...string) *host.Netlink {
	t.Helper()
	name := nstest.New(t, "ipf-plan")
	nstest.Veth(t, name, "eth0", "peer0")
	for _, a := range addrs {
		nstest.IP(t, name, "addr", "add", a, "dev", "eth0")
	}
	if len(addrs) > 0 {
		nstest.IP(t, name, "route", "add", "default", "via", "192.0.2.1", "dev", "eth0")
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	nl, err := host.NewNetlinkAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	return nl
}

func TestPlanUsesTheNodesFacts(t *testing.T) {
	// The node holds one of its VIPs already (a killed earlier run): it
	// must not mistake it for its own address.
	nl := testNetlink(t, "192.0.2.100/32", "192.0.2.12/24")
	p, err := planFrom(config.Raw{VirtualIPs: "192.0.2.100-101"}, nl, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Node.Interface != "eth0" || p.Node.Addr4.String() != "192.0.2.12" {
		t.Errorf("node = %+v, want eth0 with 192.0.2.12", p.Node)
	}
	if !strings.Contains(string(p.Text), "/dev/tcp/192.0.2.12/80") {
		t.Errorf("the check does not probe the node's own address:\n%s", p.Text)
	}
}

func TestPlanRefusesWhatTheHostLacks(t *testing.T) {
	nl := testNetlink(t, "192.0.2.12/24")
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notify.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		raw  config.Raw
		msg  string
	}{
		{"missing interface", config.Raw{VirtualIPs: "192.0.2.100", Interface: "eth9"}, `OPENSHIFT_HA_NETWORK_INTERFACE="eth9": no such interface on this host (have: eth0, lo, peer0)`},
		{"missing check script", config.Raw{VirtualIPs: "192.0.2.100", CheckScript: dir + "/nope.sh"}, "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"notify not executable", config.Raw{VirtualIPs: "192.0.2.100", NotifyScript: notExec}, "is not executable"},
		{"bad keepalived flags", config.Raw{VirtualIPs: "192.0.2.100", KeepalivedOpts: "-f /etc/other.conf"}, "KEEPALIVED_OPTIONS"},
		{"unicast v6 without a v6 address", config.Raw{VirtualIPs: "2001:db8::100", UnicastPeers: "2001:db8::11"}, "no IPv6 address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := planFrom(tt.raw, nl, "")
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want an error with %q", err, tt.msg)
			}
			if !IsConfigError(err) {
				t.Errorf("%v is not a configuration error (exit code 2)", err)
			}
		})
	}
}

func TestPlanNeedsAnAddress(t *testing.T) {
	nl := testNetlink(t)
	_, err := planFrom(config.Raw{VirtualIPs: "192.0.2.100", Interface: "eth0"}, nl, "")
	if err == nil || !strings.Contains(err.Error(), "no address of its own") {
		t.Fatalf("got %v", err)
	}
}

func TestWriteConfigReplacesAtomically(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "keepalived.conf")
	for _, text := range []string{"first\n", "second\n"} {
		if err := WriteConfig(path, []byte(text)); err != nil {
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
}

func TestUnknownVariables(t *testing.T) {
	got := UnknownVariables([]string{"OPENSHIFT_HA_VIRTUAL_IP=1.2.3.4", "OPENSHIFT_HA_VIRTUAL_IPS=1.2.3.4", "PATH=/bin", "OPENSHIFT_HA_SOMETHING_ELSE_ENTIRELY=1"})
	want := []string{"OPENSHIFT_HA_VIRTUAL_IP (did you mean OPENSHIFT_HA_VIRTUAL_IPS?)", "OPENSHIFT_HA_SOMETHING_ELSE_ENTIRELY"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}
