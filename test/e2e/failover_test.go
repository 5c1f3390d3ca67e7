package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

var allVIPs = append(slices.Clone(vips4), vips6...)

// TestConvergence: every VIP, IPv4 and IPv6, ends on exactly one node, stays
// there, and answers HTTP from the client with the holder's name.
func TestConvergence(t *testing.T) {
	s := newScenario(t)
	// fleet waits until the holders stay put for a few advert intervals.
	m := s.fleet(env(vips4Env+","+vips6Env), allVIPs).Holders
	for _, v := range allVIPs {
		url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(v, monitorPort))
		s.waitFor("HTTP through "+v.String(), func() (bool, error) {
			body, err := s.c.Get(s.ctx, url)
			return err == nil && strings.TrimSpace(body) == m[v].Name, nil
		})
	}
	t.Logf("holders: %s", m)
}

// TestServiceStopMovesVIPs: the monitored port stops answering on a holder,
// its check fails and its VIPs go to the other nodes.
func TestServiceStopMovesVIPs(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	victim := f.Holders[vips4[0]]
	moved := held(t, victim, vips4)

	if err := s.httpd[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	m := s.waitOne(vips4, func(m lab.HolderMap) bool { return !m.Holds(victim) })
	t.Logf("httpd stopped on %s (held %v): %s", victim.Name, moved, m)
	if f.Proc(victim).Exited() {
		t.Errorf("ipfailover on %s exited when its check failed", victim.Name)
	}
}

// TestSIGTERMHandover: a holder's ipfailover exits 0 on SIGTERM, its VIPs
// move, and the node is left with no VIP and no keepalived.
func TestSIGTERMHandover(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env+","+vips6Env), allVIPs)
	vip := vips4[0]
	victim := f.Holders[vip]
	p := f.Proc(victim)

	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Poll tightly to measure the handover; it is logged, not asserted.
	var handover time.Duration
	s.waitFor("another node to take "+vip.String(), func() (bool, error) {
		hs, err := s.c.Holders(vip)
		if err != nil {
			return false, err
		}
		if len(hs) == 1 && hs[0] != victim {
			handover = time.Since(start)
			return true, nil
		}
		return false, nil
	})
	t.Logf("handover of %s from %s: %v after SIGTERM", vip, victim.Name, handover)

	code, err := p.Wait(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("ipfailover on %s exited %v after SIGTERM", victim.Name, time.Since(start))
	if left := held(t, victim, allVIPs); len(left) > 0 {
		t.Errorf("%s still has %v after exiting", victim.Name, left)
	}
	if ks := keepaliveds(t, victim); len(ks) > 0 {
		t.Errorf("keepalived still running on %s: %+v", victim.Name, ks)
	}
	// keepalived was stopped, not killed with the PID namespace: it
	// logged its own orderly stop before ipfailover exited.
	out := f.Outputs[slices.Index(f.Procs, p)].String()
	if !strings.Contains(out, "Stopped Keepalived") {
		t.Errorf("keepalived on %s did not stop gracefully before ipfailover exited", victim.Name)
	}
	// The stopping keepalived removed its VIPs at once and wrote its STOP
	// lines only as it exited: the guard must not have taken the VIPs for
	// missing meanwhile and put them back on a node that is leaving.
	if strings.Contains(out, "put back a missing VIP") {
		t.Errorf("%s put a VIP back while its keepalived stopped:\n%s", victim.Name, out)
	}
	m := s.waitOne(allVIPs, func(m lab.HolderMap) bool { return !m.Holds(victim) })
	t.Logf("after the handover: %s", m)
}

// TestCrashAndRejoin: a crashed holder's VIPs move; the node comes back with
// its stale VIPs still on eth0, and a fresh ipfailover removes them before
// keepalived runs, so there is still one holder per VIP.
func TestCrashAndRejoin(t *testing.T) {
	s := newScenario(t)
	environ := env(vips4Env + "," + vips6Env)
	f := s.fleet(environ, allVIPs)
	victim := f.Holders[vips4[0]]
	stale := held(t, victim, allVIPs)

	if err := victim.Crash(); err != nil {
		t.Fatal(err)
	}
	m := s.waitOne(allVIPs, nil) // the crashed node holds nothing: its link is down
	t.Logf("after %s crashed: %s", victim.Name, m)
	if got := held(t, victim, allVIPs); !slices.Equal(got, stale) {
		t.Fatalf("crash should leave %v on %s, found %v", stale, victim.Name, got)
	}

	if err := victim.Rejoin(s.ctx); err != nil {
		t.Fatal(err)
	}
	// httpd died in the crash too: bring the node's service back first.
	s.startHTTPD(victim)
	p, out := s.start(victim, environ)
	m = s.waitOne(allVIPs, func(lab.HolderMap) bool { return !p.Exited() })
	t.Logf("after %s rejoined: %s", victim.Name, m)
	if strings.Contains(out.String(), "removed VIPs") {
		t.Logf("%s reported removing its stale VIPs", victim.Name)
	}
	// And it takes part again: stop the others, it takes everything.
	for _, n := range others(s.c, victim) {
		s.stop(f.Proc(n))
	}
	s.waitOne(allVIPs, func(m lab.HolderMap) bool {
		for _, n := range m {
			if n != victim {
				return false
			}
		}
		return true
	})
}

// TestIptablesChainRestart: restarting with OPENSHIFT_HA_IPTABLES_CHAIN=INPUT
// never stacks a second VRRP rule in the node's INPUT chain.
func TestIptablesChainRestart(t *testing.T) {
	s := newScenario(t)
	environ := env(vips4Env+","+vips6Env, "OPENSHIFT_HA_IPTABLES_CHAIN=INPUT")
	f := s.fleet(environ, allVIPs)
	n := s.c.Nodes[0]
	p := f.Proc(n)

	check := func(round int) {
		t.Helper()
		v4 := inputRules(s.ctx, t, n, "iptables", "224.0.0.18")
		v6 := inputRules(s.ctx, t, n, "ip6tables", "ff02::12")
		if len(v4) != 1 || len(v6) != 1 {
			t.Errorf("round %d: INPUT has %d IPv4 rules %q and %d IPv6 rules %q for VRRP, want one each", round, len(v4), v4, len(v6), v6)
		}
		all, err := n.Exec(s.ctx, "iptables", "-w", "-S", "INPUT")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(all)), "\n")
		if len(lines) < 2 || lines[1] != "-A INPUT -d 224.0.0.18/32 -j ACCEPT" {
			t.Errorf("round %d: INPUT = %q, want the VRRP rule first", round, lines)
		}
	}
	check(0)
	for round := 1; round <= 3; round++ {
		s.stop(p)
		p, _ = s.start(n, environ)
		// The rule goes in before keepalived starts.
		s.waitFor("keepalived on "+n.Name, func() (bool, error) {
			ks, err := p.Find("keepalived")
			return len(ks) > 0, err
		})
		check(round)
	}
	s.waitOne(allVIPs, nil)
}

// TestKeepalivedKilledComesBack: SIGKILL to keepalived, three times; the
// supervisor restarts it each time and reaps every orphan.
func TestKeepalivedKilledComesBack(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	n := f.Holders[vips4[0]]
	p := f.Proc(n)

	pidFile := func() (int, error) {
		b, err := p.ReadFile("/run/keepalived.pid")
		if err != nil {
			return 0, err
		}
		var pid int
		_, err = fmt.Sscan(string(b), &pid)
		return pid, err
	}
	alive := func(nsPid int) bool {
		host, err := p.HostPid(nsPid)
		if err != nil {
			return false
		}
		ps, err := p.Procs()
		if err != nil {
			return false
		}
		i := slices.IndexFunc(ps, func(q lab.Proc) bool { return q.Pid == host })
		return i >= 0 && ps[i].Comm == "keepalived" && ps[i].State != "Z"
	}

	last := 0
	for round := 1; round <= 3; round++ {
		var nsPid int
		s.waitFor("a live keepalived in the pid file", func() (bool, error) {
			if p.Exited() {
				code, _ := p.Wait(s.ctx)
				return false, fmt.Errorf("ipfailover exited %d after %d keepalived kills", code, round-1)
			}
			pid, err := pidFile()
			if err != nil || pid == last {
				return false, nil
			}
			nsPid = pid
			return alive(pid), nil
		})
		host, err := p.HostPid(nsPid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killing keepalived pid %d (host %d)", round, nsPid, host)
		if err := syscall.Kill(host, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		last = nsPid
	}
	s.waitFor("keepalived back after the last kill", func() (bool, error) {
		if p.Exited() {
			code, _ := p.Wait(s.ctx)
			return false, fmt.Errorf("ipfailover exited %d after 3 keepalived kills", code)
		}
		pid, err := pidFile()
		return err == nil && pid != last && alive(pid), nil
	})
	s.waitFor("no zombie in the PID namespace", func() (bool, error) {
		z, err := p.Zombies()
		return len(z) == 0, err
	})
	if p.Exited() {
		t.Fatal("ipfailover exited after three keepalived deaths")
	}
	m := s.waitOne(vips4, nil)
	t.Logf("after the kills: %s", m)
}

// TestCrashLoopExits: a keepalived that keeps dying (killed as soon as it
// appears) ends ipfailover with a non-zero code, and the node is left with
// none of the VIPs, so the pod shows the failure and the VIPs move.
func TestCrashLoopExits(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	n := f.Holders[vips4[0]]
	p := f.Proc(n)

	kills := 0
	s.waitFor("ipfailover to give up", func() (bool, error) {
		if p.Exited() {
			return true, nil
		}
		ks, err := p.Find("keepalived")
		if err != nil {
			return false, nil // exiting
		}
		for _, k := range ks {
			if k.PPid == p.Pid && k.State != "Z" {
				if syscall.Kill(k.Pid, syscall.SIGKILL) == nil {
					kills++
				}
			}
		}
		return false, nil
	})
	code, err := p.Wait(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ipfailover on %s exited %d after %d keepalived kills", n.Name, code, kills)
	if code == 0 {
		t.Errorf("exit code 0 after a keepalived crash loop, want non-zero")
	}
	if left := held(t, n, vips4); len(left) > 0 {
		t.Errorf("%s still has %v after giving up", n.Name, left)
	}
	s.waitOne(vips4, func(m lab.HolderMap) bool {
		for _, h := range m {
			if h == n {
				return false
			}
		}
		return true
	})
}
