package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/ipfailover/ipfailover/test/lab"
)

// TestSIGHUPReloads: SIGHUP re-renders keepalived.conf and reloads the same
// keepalived; it neither stops keepalived nor moves a VIP.
func TestSIGHUPReloads(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	n := f.Holders[vips4[0]]
	p := f.Proc(n)
	i := 0
	for j, q := range f.Procs {
		if q == p {
			i = j
		}
	}
	out := f.Outputs[i]

	pid := func() string {
		b, err := p.ReadFile("/run/keepalived.pid")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	before := pid()
	// A marker in the old file shows the file was written again.
	if _, err := p.Exec(s.ctx, "sh", "-c", "echo '! stale' >> /etc/keepalived/keepalived.conf"); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.waitFor(fmt.Sprintf("reload %d logged by ipfailover and keepalived", round), func() (bool, error) {
			if p.Exited() {
				return false, fmt.Errorf("ipfailover exited on SIGHUP")
			}
			return out.Count("reloaded keepalived") >= round && out.Count("Reloading") >= round, nil
		})
	}
	if after := pid(); after != before {
		t.Errorf("keepalived pid %s became %s: SIGHUP restarted it", before, after)
	}
	conf, err := p.ReadFile("/etc/keepalived/keepalived.conf")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf), "! stale") {
		t.Error("keepalived.conf was not re-rendered")
	}
	m := s.waitOne(vips4, nil)
	for _, v := range vips4 {
		if m[v] != f.Holders[v] {
			t.Errorf("%s moved from %s to %s on reload", v, f.Holders[v].Name, m[v].Name)
		}
	}
}

// TestInterfaceMoveEndsRun: with OPENSHIFT_HA_NETWORK_INTERFACE unset and
// multicast VRRP, the default route moves to another interface and the
// node gets SIGHUP. The run ends (keepalived hands the VIPs over, nothing
// of this configuration stays on the old interface, exit 1 so that the pod
// restarts), and a new run on the node plans, guards and measures the new
// interface.
func TestInterfaceMoveEndsRun(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	n := f.Holders[vips4[0]]
	p := f.Proc(n)
	var out *lab.Output
	for i, q := range f.Procs {
		if q == p {
			out = f.Outputs[i]
		}
	}
	for _, argv := range [][]string{
		{"ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p"},
		{"ip", "link", "set", "eth1", "up"},
		{"ip", "link", "set", "eth1p", "up"},
		{"ip", "addr", "add", "198.51.100.10/24", "dev", "eth1"},
		{"ip", "route", "replace", "default", "via", "198.51.100.1", "dev", "eth1"},
	} {
		if _, err := n.Exec(s.ctx, argv...); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("ipfailover exited %d after its interface moved, want 1 (the pod restarts)", code)
	}
	if !strings.Contains(out.String(), "the VRRP interface changed") {
		t.Errorf("the log does not say the interface changed:\n%s", out)
	}
	if h := held(t, n, vips4); len(h) > 0 {
		t.Errorf("VIPs %v left on eth0 after the run ended", h)
	}
	m := s.waitOne(vips4, func(m lab.HolderMap) bool {
		for _, v := range vips4 {
			if m[v] == n {
				return false
			}
		}
		return true
	})
	t.Logf("after the move: %s", m)

	// The pod starts again: on eth1, which it plans, renders and watches.
	p2, out2 := s.start(n, env(vips4Env))
	s.waitFor("the new run on eth1", func() (bool, error) {
		if p2.Exited() {
			return false, fmt.Errorf("the new run exited:\n%s", out2)
		}
		conf, err := p2.ReadFile("/etc/keepalived/keepalived.conf")
		if err != nil {
			return false, nil
		}
		return strings.Contains(string(conf), "interface eth1") && !strings.Contains(string(conf), "interface eth0"), nil
	})
	// Alone on eth1, this node's keepalived holds every VIP there, and the
	// metrics say so.
	hc := s.c.HTTPClient()
	s.waitFor("ipfailover_vip_held on eth1", func() (bool, error) {
		m, err := scrapeNode(s.ctx, hc, n)
		if err != nil {
			return false, nil
		}
		return strings.Contains(m.body, `ipfailover_vip_held{instance="OpenShift_IPFailover_VIP_1",intf="eth1",vip="192.0.2.100"} 1`), nil
	})
	s.stop(p2)
}

// TestMetricsPortTaken: the metrics port in use ends the run with exit 1
// before keepalived starts, and the host keeps nothing of it.
func TestMetricsPortTaken(t *testing.T) {
	s := newScenario(t)
	n := s.c.Nodes[0]
	squatter, err := n.Start(s.ctx, []string{"python3", "-m", "http.server", "--bind", "0.0.0.0", "9650"}, nil, s.output("port squatter"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = squatter.Kill() }()
	s.waitFor("the squatter listening on :9650", func() (bool, error) {
		c, err := n.Dial(s.ctx, "tcp", "127.0.0.1:9650")
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
	p, out := s.start(n, env(vips4Env))
	code, err := p.Wait(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("ipfailover exited %d with its metrics port taken, want 1", code)
	}
	for _, want := range []string{"metrics: listening on :9650 (OPENSHIFT_HA_METRICS_ADDRESS)", "address already in use"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "keepalived started") {
		t.Errorf("keepalived was started although the run had failed:\n%s", out)
	}
	if h := held(t, n, vips4); len(h) > 0 {
		t.Errorf("VIPs %v on the node after the run failed", h)
	}
}
