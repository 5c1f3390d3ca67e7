package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/test/nstest"
)

// binary is the ipfailover built for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ipfailover-cmd")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "ipfailover")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building ipfailover: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node makes a network namespace like a node: eth0 with 192.0.2.11/24, a
// stale VIP 192.0.2.100/32 and a default route.
func node(t *testing.T) string {
	t.Helper()
	ns := nstest.New(t, "ipf-cmd")
	nstest.Veth(t, ns, "eth0", "peer0")
	nstest.IP(t, ns, "addr", "add", "192.0.2.11/24", "dev", "eth0")
	nstest.IP(t, ns, "addr", "add", "192.0.2.100/32", "dev", "eth0")
	nstest.IP(t, ns, "route", "add", "default", "via", "192.0.2.1")
	return ns
}

// ipfailover runs the binary in ns with exactly env.
func ipfailover(t *testing.T, ns string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// A run that was wrongly accepted would supervise keepalived forever.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, binary}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func inNS(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestBadInputChangesNothing: every kind of bad value is refused with exit
// code 2 and the variable named, before the host changes: the stale VIP
// stays, no firewall rule appears, no config file is written.
func TestBadInputChangesNothing(t *testing.T) {
	ns := node(t)
	conf := filepath.Join(t.TempDir(), "keepalived.conf")
	base := []string{"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-101", "OPENSHIFT_HA_IPTABLES_CHAIN=INPUT", "KEEPALIVED_CONFIG=" + conf, "OPENSHIFT_HA_METRICS_ADDRESS="}
	for _, tt := range []struct {
		name string
		env  string
		want string
	}{
		{"malformed range", "OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-99", "OPENSHIFT_HA_VIRTUAL_IPS"},
		{"not an address", "OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.300", "OPENSHIFT_HA_VIRTUAL_IPS"},
		{"offset out of range", "OPENSHIFT_HA_VRRP_ID_OFFSET=255", "OPENSHIFT_HA_VRRP_ID_OFFSET"},
		{"groups negative", "OPENSHIFT_HA_VIP_GROUPS=-2", "OPENSHIFT_HA_VIP_GROUPS"},
		{"name injection", "OPENSHIFT_HA_CONFIG_NAME=x\n}\nvrrp_instance y {", "OPENSHIFT_HA_CONFIG_NAME"},
		{"check script injection", "OPENSHIFT_HA_CHECK_SCRIPT=/bin/true\"\n}", "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"notify script comment", "OPENSHIFT_HA_NOTIFY_SCRIPT=/bin/true # x", "OPENSHIFT_HA_NOTIFY_SCRIPT"},
		{"peer injection", "OPENSHIFT_HA_UNICAST_PEERS=192.0.2.12 }", "OPENSHIFT_HA_UNICAST_PEERS"},
		{"email injection", "OPENSHIFT_HA_ADMIN_EMAILS=a@b\n}", "OPENSHIFT_HA_ADMIN_EMAILS"},
		{"smtp injection", "OPENSHIFT_HA_SMTP_SERVER=1.2.3.4!", "OPENSHIFT_HA_SMTP_SERVER"},
		{"chain injection", "OPENSHIFT_HA_IPTABLES_CHAIN=INPUT -j DROP", "OPENSHIFT_HA_IPTABLES_CHAIN"},
		{"preemption", "OPENSHIFT_HA_PREEMPTION=always", "OPENSHIFT_HA_PREEMPTION"},
		{"unicast without peers", "OPENSHIFT_HA_USE_UNICAST=true", "OPENSHIFT_HA_USE_UNICAST"},
		{"missing interface", "OPENSHIFT_HA_NETWORK_INTERFACE=eth9", `OPENSHIFT_HA_NETWORK_INTERFACE="eth9": no such interface`},
		{"missing check script", "OPENSHIFT_HA_CHECK_SCRIPT=/nonexistent/check.sh", "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"chain read as an option", "OPENSHIFT_HA_IPTABLES_CHAIN=-F", `OPENSHIFT_HA_IPTABLES_CHAIN="-F": not an iptables chain name`},
		{"keepalived flags", "KEEPALIVED_OPTIONS=-D; reboot", `KEEPALIVED_OPTIONS="-D; reboot": ';' needs a shell`},
		{"too many ids", "OPENSHIFT_HA_VRRP_ID_OFFSET=250\x00OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-110", "need router ids up to 261"},
		{"peers from pods and a list", "OPENSHIFT_HA_UNICAST_PEERS_FROM=pods\x00OPENSHIFT_HA_UNICAST_PEERS=192.0.2.12", "cannot be set with OPENSHIFT_HA_UNICAST_PEERS_FROM=pods"},
		{"peers from pods without the pod's name", "OPENSHIFT_HA_UNICAST_PEERS_FROM=pods\x00POD_NAMESPACE=ipfailover", "POD_NAME is not set"},
		{"peers from pods without a token", "OPENSHIFT_HA_UNICAST_PEERS_FROM=pods\x00POD_NAME=ipfailover-1\x00POD_NAMESPACE=ipfailover", "automountServiceAccountToken: true"},
		{"bridge without unicast", "OPENSHIFT_HA_MULTICAST_BRIDGE=true", "OPENSHIFT_HA_MULTICAST_BRIDGE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, cmd := range []string{"run", "render"} {
				if cmd == "render" && strings.HasPrefix(tt.want, "POD_NAME is not set") {
					continue // render plans as a pod alone would (TestRenderOutsideAPod)
				}
				_, stderr, code := ipfailover(t, ns, append(append([]string{}, base...), strings.Split(tt.env, "\x00")...), cmd)
				if code != 2 {
					t.Fatalf("%s: exit %d, want 2; stderr:\n%s", cmd, code, stderr)
				}
				if !strings.Contains(stderr, tt.want) {
					t.Errorf("%s: stderr does not name %q:\n%s", cmd, tt.want, stderr)
				}
				if strings.Contains(stderr, "panic") {
					t.Fatalf("panic:\n%s", stderr)
				}
				for _, line := range strings.Split(stderr, "\n") {
					for _, v := range config.Variables() {
						if strings.Count(line, v+"=") > 1 {
							t.Errorf("%s: a line names %s twice: %s", cmd, v, line)
						}
					}
				}
			}
			if rules := inNS(t, ns, "iptables", "-S", "INPUT"); strings.Contains(rules, "224.0.0.18") {
				t.Fatalf("firewall changed:\n%s", rules)
			}
			if addrs := inNS(t, ns, "ip", "-o", "addr", "show", "eth0"); !strings.Contains(addrs, "192.0.2.100/32") {
				t.Fatalf("stale VIP removed before validation passed:\n%s", addrs)
			}
			if _, err := os.Stat(conf); err == nil {
				t.Fatalf("%s written", conf)
			}
		})
	}
}

func TestRender(t *testing.T) {
	ns := node(t)
	out, stderr, code := ipfailover(t, ns, []string{"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-101", "OPENSHIFT_HA_UNICAST_PEERS=192.0.2.11,192.0.2.12"}, "render")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	for _, want := range []string{
		"vrrp_instance OpenShift_IPFailover_VIP_1 {", "interface eth0", "virtual_router_id 11", "virtual_router_id 12",
		"unicast_src_ip 192.0.2.11", "192.0.2.12\n", "192.0.2.100 dev eth0",
		"ipfailover connects to 192.0.2.11:80 every 150ms", "track_file chk_OpenShift_IPFailover {", "file /run/ipfailover/check",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\n      192.0.2.11\n") {
		t.Errorf("the node's own address is listed as a peer:\n%s", out)
	}
}

// TestRenderOutsideAPod: with the peers from the pods but no POD_NAME (a
// check on a node before the first apply), render prints what a pod alone
// would run and says so.
func TestRenderOutsideAPod(t *testing.T) {
	ns := node(t)
	out, stderr, code := ipfailover(t, ns, []string{"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-101", "OPENSHIFT_HA_UNICAST_PEERS_FROM=pods"}, "render")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "POD_NAME is not set") || !strings.Contains(out, "vrrp_version 3") || !strings.Contains(out, "unicast_src_ip 192.0.2.11") {
		t.Errorf("stderr:\n%s\nout:\n%s", stderr, out)
	}
}

// TestPeersCommand: without the pods, peers says what the settings list.
func TestPeersCommand(t *testing.T) {
	ns := node(t)
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100"}, "multicast VRRP: no unicast peers"},
		{[]string{"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100", "OPENSHIFT_HA_UNICAST_PEERS=192.0.2.11,192.0.2.13,192.0.2.12"},
			"this node's own address left out: 192.0.2.12,192.0.2.13\n"},
	} {
		out, stderr, code := ipfailover(t, ns, tt.env, "peers")
		if code != 0 || !strings.Contains(out, tt.want) {
			t.Errorf("peers with %q: exit %d, output %q, want %q\n%s", tt.env, code, out, tt.want, stderr)
		}
	}
}

func TestVRIDs(t *testing.T) {
	out, err := exec.Command(binary, "vr-ids", "vmware").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "HA_EXCLUDED_VRRP_IDS=\"109 124\"") {
		t.Errorf("vr-ids vmware:\n%s", out)
	}
	if err := exec.Command(binary, "vr-ids").Run(); err == nil {
		t.Error("vr-ids without a name succeeded")
	}
}

func TestUnknownCommand(t *testing.T) {
	err := exec.Command(binary, "frobnicate").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("unknown command: %v, want exit 2", err)
	}
}
