package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// The split-brain scenarios: a node that hears no adverts takes VIPs that
// another node holds (duplicates, seen by both and healed when adverts flow
// again), a VIP that sits on a node whose keepalived is not MASTER for it
// (removed), and another VRRP deployment on this one's router ids (named).
// Detection times are logged; the documented figures come from these runs.

// duplicate returns ipfailover_vip_duplicate for vip: the highest value of
// its series and the mac labels of the series at 1.
func (m *scrape) duplicate(vip netip.Addr) (float64, []string, bool) {
	var (
		top   float64
		macs  []string
		found bool
	)
	for _, s := range m.fams["ipfailover_vip_duplicate"].GetMetric() {
		l := labelMap(s)
		if l["vip"] != vip.String() {
			continue
		}
		found = true
		v := sampleValue(s)
		top = max(top, v)
		if v == 1 {
			macs = append(macs, l["mac"])
		}
	}
	return top, macs, found
}

// pollFast polls cond every 10 ms, so the times the tests log are close,
// until it holds; fatal after agreeTimeout.
func (s *scenario) pollFast(t *testing.T, what string, cond func(context.Context) error) {
	t.Helper()
	s.pollEvery(t, what, 10*time.Millisecond, cond)
}

// wantDuplicate is a condition: n's metrics show vip as a duplicate whose
// other host is mac (or, with mac empty, not a duplicate).
func wantDuplicate(hc *http.Client, n *lab.Node, vip netip.Addr, mac string) func(context.Context) error {
	return func(ctx context.Context) error {
		m, err := scrapeNode(ctx, hc, n)
		if err != nil {
			return err
		}
		v, macs, ok := m.duplicate(vip)
		switch {
		case !ok:
			return fmt.Errorf("%s: no ipfailover_vip_duplicate{vip=%q}", n.Name, vip)
		case mac == "" && v != 0:
			return fmt.Errorf("%s: ipfailover_vip_duplicate{vip=%q} %v with %v, want 0", n.Name, vip, v, macs)
		case mac != "" && (v != 1 || !slices.Equal(macs, []string{mac})):
			return fmt.Errorf("%s: ipfailover_vip_duplicate{vip=%q} %v with %v, want 1 with %s", n.Name, vip, v, macs, mac)
		}
		return nil
	}
}

// TestSplitBrainDuplicateVIP blocks VRRP on a node: it hears no adverts,
// becomes MASTER everywhere and takes the VIPs the other nodes keep, so two
// nodes answer for each, over ARP (IPv4) and neighbour discovery (IPv6).
// For one VIP of each family, both its nodes report ipfailover_vip_duplicate
// 1 with the other's MAC and log the conflict once. With VRRP back, the
// blocked node hears the holder's higher priority and lets go: one holder,
// the gauges back to 0, the end logged once, and the rightful master never
// lost the VIP to the guard.
func TestSplitBrainDuplicateVIP(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env+","+vips6Env), allVIPs)
	hc := s.c.HTTPClient()

	// The blocked node must hold neither watched VIP.
	vip4 := vips4[0]
	var (
		blocked *lab.Node
		vip6    netip.Addr
	)
	for _, n := range others(s.c, f.Holders[vip4]) {
		for _, v := range vips6 {
			if blocked == nil && f.Holders[v] != n {
				blocked, vip6 = n, v
			}
		}
	}
	type watched struct {
		vip       netip.Addr
		holder    *lab.Node
		holderMAC string
	}
	var ws []watched
	for _, v := range []netip.Addr{vip4, vip6} {
		mac, err := f.Holders[v].MAC()
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, watched{v, f.Holders[v], mac.String()})
	}
	mac, err := blocked.MAC()
	if err != nil {
		t.Fatal(err)
	}
	blockedMAC := mac.String()
	for _, n := range s.c.Nodes {
		for _, v := range allVIPs {
			s.pollFast(t, n.Name+" without duplicates", wantDuplicate(hc, n, v, ""))
		}
	}

	if err := blocked.BlockVRRP(s.ctx); err != nil {
		t.Fatal(err)
	}
	blockedAt := time.Now()
	twoHolders := map[netip.Addr]time.Time{}
	s.pollFast(t, "second holders", func(context.Context) error {
		for _, w := range ws {
			if _, ok := twoHolders[w.vip]; ok {
				continue
			}
			hs, err := s.c.Holders(w.vip)
			if err != nil {
				return err
			}
			if !slices.Contains(hs, w.holder) || !slices.Contains(hs, blocked) {
				return fmt.Errorf("holders of %s: %v", w.vip, hs)
			}
			twoHolders[w.vip] = time.Now()
		}
		return nil
	})
	for _, w := range ws {
		t.Logf("VRRP blocked on %s: it took %s (from %s) %v later", blocked.Name, w.vip, w.holder.Name, twoHolders[w.vip].Sub(blockedAt).Round(time.Millisecond))
	}

	// Poll every node of every conflict together, so each time is its own.
	type check struct {
		n        *lab.Node
		vip      netip.Addr
		otherMAC string
		at       time.Duration
	}
	var checks []check
	for _, w := range ws {
		checks = append(checks, check{n: w.holder, vip: w.vip, otherMAC: blockedMAC}, check{n: blocked, vip: w.vip, otherMAC: w.holderMAC})
	}
	s.pollFast(t, "every node reporting its duplicates", func(ctx context.Context) error {
		var errs []string
		for i := range checks {
			c := &checks[i]
			if c.at > 0 {
				continue
			}
			if err := wantDuplicate(hc, c.n, c.vip, c.otherMAC)(ctx); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			c.at = time.Since(twoHolders[c.vip])
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	})
	for _, c := range checks {
		t.Logf("DETECTION: %s reports ipfailover_vip_duplicate{vip=%q,mac=%q} 1, %v after the second holder appeared",
			c.n.Name, c.vip, c.otherMAC, c.at.Round(time.Millisecond))
	}

	if err := blocked.UnblockVRRP(s.ctx); err != nil {
		t.Fatal(err)
	}
	healStart := time.Now()
	m, err := s.c.WaitOneHolder(s.ctx, []netip.Addr{vip4, vip6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	oneHolder := time.Since(healStart)
	for _, w := range ws {
		if m[w.vip] != w.holder {
			t.Errorf("after the partition healed %s went to %s, want it back on %s alone", w.vip, m[w.vip].Name, w.holder.Name)
		}
	}
	for _, c := range checks {
		s.pollFast(t, c.n.Name+" without the duplicate", wantDuplicate(hc, c.n, c.vip, ""))
	}
	t.Logf("HEALING: VRRP unblocked: one holder of %s and %s after %v, the gauges back to 0 after %v",
		vip4, vip6, oneHolder.Round(time.Millisecond), time.Since(healStart).Round(time.Millisecond))

	for _, c := range checks {
		out := f.Outputs[slices.Index(f.Procs, f.Proc(c.n))].String()
		starts := matchingLines(out, "duplicate VIP: another host answers", "vip="+c.vip.String()+" ")
		ends := matchingLines(out, "duplicate VIP over", "vip="+c.vip.String()+" ")
		if len(starts) != 1 || !strings.Contains(starts[0], "other_mac="+c.otherMAC) {
			t.Errorf("%s logged the start for %s %d times, want once naming %s: %q", c.n.Name, c.vip, len(starts), c.otherMAC, starts)
		}
		if len(ends) != 1 || !strings.Contains(ends[0], "other_mac="+c.otherMAC) {
			t.Errorf("%s logged the end for %s %d times, want once naming %s: %q", c.n.Name, c.vip, len(ends), c.otherMAC, ends)
		}
	}
	for _, n := range s.c.Nodes {
		sc := s.waitScrape(t, hc, n, nil)
		for _, v := range allVIPs {
			if got := sc.value("ipfailover_vip_stray_removed_total", map[string]string{"vip": v.String()}); got != 0 {
				t.Errorf("%s removed %s as a stray %v times: every VIP was on a MASTER", n.Name, v, got)
			}
		}
	}
}

// matchingLines returns the lines of out that contain every one of subs.
func matchingLines(out string, subs ...string) []string {
	var lines []string
	for line := range strings.SplitSeq(out, "\n") {
		ok := true
		for _, sub := range subs {
			ok = ok && strings.Contains(line, sub)
		}
		if ok {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestStrayVIPRemoved adds a VIP by hand to a node whose keepalived is
// BACKUP for it: the node removes it (after two advert intervals), counts
// and logs it, and the MASTER keeps the VIP all along.
func TestStrayVIPRemoved(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	hc := s.c.HTTPClient()
	vip := vips4[0]
	master := f.Holders[vip]
	backup := others(s.c, master)[0]

	// The MASTER must hold the VIP the whole time.
	var lost atomic.Int64
	watchCtx, stopWatching := context.WithCancel(s.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			if has, err := master.Has(vip); err == nil && !has {
				lost.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	added := time.Now()
	if _, err := backup.Exec(s.ctx, "ip", "addr", "add", vip.String()+"/32", "dev", lab.Link); err != nil {
		t.Fatal(err)
	}
	s.pollFast(t, "the stray VIP removed from "+backup.Name, func(context.Context) error {
		has, err := backup.Has(vip)
		if err == nil && has {
			err = fmt.Errorf("%s still has %s", backup.Name, vip)
		}
		return err
	})
	t.Logf("DETECTION: %s added by hand to %s (BACKUP for it), removed %v later", vip, backup.Name, time.Since(added).Round(time.Millisecond))
	s.waitScrape(t, hc, backup, func(m *scrape) error {
		if got := m.value("ipfailover_vip_stray_removed_total", map[string]string{"vip": vip.String()}); got != 1 {
			return fmt.Errorf("%s: ipfailover_vip_stray_removed_total{vip=%q} %v, want 1", backup.Name, vip, got)
		}
		return nil
	})
	// Watch the MASTER a little longer: nothing may follow.
	time.Sleep(3 * time.Second)
	stopWatching()
	<-watched
	if n := lost.Load(); n > 0 {
		t.Errorf("%s, the MASTER, was seen without %s %d times", master.Name, vip, n)
	}
	m := s.waitScrape(t, hc, master, nil)
	if got := m.value("ipfailover_vip_stray_removed_total", map[string]string{"vip": vip.String()}); got != 0 {
		t.Errorf("%s (MASTER): ipfailover_vip_stray_removed_total{vip=%q} %v, want 0", master.Name, vip, got)
	}
	out := f.Outputs[slices.Index(f.Procs, f.Proc(backup))].String()
	if l := matchingLines(out, "removed a stray VIP", "vip="+vip.String()+"/32", "keepalived_state=BACKUP"); len(l) != 1 {
		t.Errorf("%s logged the removal %d times, want once naming %s/32 and BACKUP:\n%s", backup.Name, len(l), vip, supervisorLog(f.Outputs[slices.Index(f.Procs, f.Proc(backup))]))
	}
	if h, err := s.c.Holder(vip); err != nil || h != master {
		t.Errorf("holder of %s at the end: %v %v, want %s", vip, h, err, master.Name)
	}
}

// TestMissingVIPRestored runs node1's keepalived without CAP_NET_ADMIN
// (setpriv drops it from the bounding set): it elects and becomes MASTER,
// but every address it adds fails, and it announces the VIPs all the same.
// The guard, which keeps the capability, puts each VIP back half a second
// later, counts and logs it, and clients reach the VIPs. When a
// second node joins and its priorities take some VIPs over, node1's
// keepalived cannot remove them (it did not add them): the guard does, at
// once, and no VIP stays on two nodes.
func TestMissingVIPRestored(t *testing.T) {
	s := newScenario(t)
	wrappers, err := os.MkdirTemp("/var/tmp", "ipfailover-e2e-nocap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(wrappers) })
	script := "#!/bin/sh\nexec setpriv --bounding-set=-net_admin " + keepalivedPath(t) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrappers, "keepalived"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	n1, n2 := s.c.Nodes[0], s.c.Nodes[1]
	environ := env(vips4Env + "," + vips6Env)
	crippled := append(slices.Clone(environ), "PATH="+wrappers+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	started := time.Now()
	p1, out1 := s.start(n1, crippled)
	m := s.waitOne(allVIPs, func(m lab.HolderMap) bool { return !p1.Exited() })
	t.Logf("RESTORE: %s's keepalived cannot add addresses; every VIP on it %v after the start: %s", n1.Name, time.Since(started).Round(time.Millisecond), m)
	if !strings.Contains(out1.String(), "Netlink: error: Operation not permitted") {
		t.Errorf("%s's keepalived did not fail to add the VIPs; the scenario tests nothing:\n%s", n1.Name, out1.String())
	}
	hc := s.c.HTTPClient()
	for _, v := range allVIPs {
		url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(v, monitorPort))
		s.waitFor("HTTP through "+v.String(), func() (bool, error) {
			body, err := s.c.Get(s.ctx, url)
			return err == nil && strings.TrimSpace(body) == n1.Name, nil
		})
	}
	s.waitScrape(t, hc, n1, func(m *scrape) error {
		for _, v := range allVIPs {
			if got := m.value("ipfailover_vip_restored_total", map[string]string{"vip": v.String()}); got != 1 {
				return fmt.Errorf("ipfailover_vip_restored_total{vip=%q} %v, want 1", v, got)
			}
		}
		return nil
	})
	if l := matchingLines(out1.String(), "put back a missing VIP", "keepalived_state=MASTER"); len(l) != len(allVIPs) {
		t.Errorf("%s logged %d restores, want %d:\n%s", n1.Name, len(l), len(allVIPs), supervisorLog(out1))
	}

	// node2 joins with a working keepalived: it preempts the instances it
	// has the higher priority for; node1's guard removes those VIPs.
	p2, _ := s.start(n2, environ)
	s.waitOne(allVIPs, func(m lab.HolderMap) bool { return !p2.Exited() && m.Holds(n2) })
	time.Sleep(settle)
	m = s.waitOne(allVIPs, nil)
	t.Logf("after %s joined: %s", n2.Name, m)
	for _, v := range allVIPs {
		if m[v] != n2 {
			continue
		}
		if l := matchingLines(out1.String(), "removed a stray VIP", "vip="+netip.PrefixFrom(v, v.BitLen()).String(), "put_back_here=true"); len(l) != 1 {
			t.Errorf("%s: %d removals of %s, the VIP it put back and gave up, want 1", n1.Name, len(l), v)
		}
	}
}

// keepalivedPath is the keepalived binary on PATH.
func keepalivedPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("keepalived")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// foreignKeepalived is another VRRP deployment: a plain keepalived on this
// deployment's first router id (OPENSHIFT_HA_VRRP_ID_OFFSET 10 + 1) with
// another password and its own VIP.
const foreignKeepalived = `global_defs {
   router_id foreign
   script_user root
}
vrrp_instance foreign {
   interface eth0
   state MASTER
   virtual_router_id 11
   priority 100
   authentication {
      auth_type PASS
      auth_pass another
   }
   virtual_ipaddress {
      192.0.2.200 dev eth0
   }
}
`

// TestForeignSpeaker runs ipfailover on three nodes and a plain keepalived
// on a fourth with one of their router ids and another password: every
// node counts its adverts under its address and logs it once, with the
// hint to move one of the two deployments.
func TestForeignSpeaker(t *testing.T) {
	s := newScenarioOf(t, 4)
	members := s.c.Nodes[:3]
	stranger := s.c.Nodes[3]
	f := s.fleet(env(vips4Env), vips4, members...)
	hc := s.c.HTTPClient()

	out := s.output("plain keepalived on " + stranger.Name)
	if _, err := stranger.StartKeepalived(s.ctx, foreignKeepalived, out); err != nil {
		t.Fatal(err)
	}
	// keepalived starts as BACKUP and sends its first advert when it
	// becomes MASTER, three advert intervals later.
	s.pollFast(t, "the plain keepalived's first advert", func(context.Context) error {
		if !strings.Contains(out.String(), "Entering MASTER STATE") {
			return fmt.Errorf("not MASTER yet")
		}
		return nil
	})
	start := time.Now()
	source := stranger.Addr4.String()
	for _, n := range members {
		s.pollFast(t, n.Name+" counting the foreign adverts", func(ctx context.Context) error {
			m, err := scrapeNode(ctx, hc, n)
			if err != nil {
				return err
			}
			if got := m.value("ipfailover_vrrp_foreign_adverts_total", map[string]string{"vrid": "11", "source": source}); got < 1 {
				return fmt.Errorf("%s: ipfailover_vrrp_foreign_adverts_total{vrid=\"11\",source=%q} %v", n.Name, source, got)
			}
			return nil
		})
		t.Logf("DETECTION: %s counts the foreign adverts from %s %v after the plain keepalived's first advert", n.Name, source, time.Since(start).Round(time.Millisecond))
	}
	for _, n := range members {
		out := f.Outputs[slices.Index(f.Procs, f.Proc(n))].String()
		l := matchingLines(out, "foreign VRRP speaker", "source="+source)
		if len(l) != 1 {
			t.Errorf("%s logged the foreign speaker %d times, want once", n.Name, len(l))
			continue
		}
		for _, want := range []string{"vrid=11", "another authentication password", "VIPs [192.0.2.200]", "ipfailover vr-ids", "OPENSHIFT_HA_VRRP_ID_OFFSET"} {
			if !strings.Contains(l[0], want) {
				t.Errorf("%s: log line %q lacks %q", n.Name, l[0], want)
			}
		}
	}
	// The foreign adverts fail keepalived's authentication: the VIPs stay.
	if now, err := s.c.WaitOneHolder(s.ctx, vips4, nil); err != nil || now.String() != f.Holders.String() {
		t.Errorf("holders %s (%v), want them unchanged: %s", now, err, f.Holders)
	}
}
