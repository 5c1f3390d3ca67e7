package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// flakyFor is how long the flaky service must keep its VIPs.
const flakyFor = 60 * time.Second

// TestFlakyServiceKeepsVIPs: on the holder of a VIP, the monitored service
// refuses one connection in twenty and drops the SYN of another one in
// twenty, at random (nftables in the node). For a minute the built-in
// check meets those failures, counts them, and keeps passing: the VIPs do
// not move and keepalived never enters FAULT. Then the service stops and
// the VIPs move to the other nodes.
func TestFlakyServiceKeepsVIPs(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	victim := f.Holders[vips4[0]]
	kept := held(t, victim, vips4)
	out := f.Outputs[slices.Index(s.c.Nodes, victim)]
	hc := s.c.HTTPClient()

	// Only connections to the node's own address, the check's target:
	// clients of the VIPs are not affected.
	rules := fmt.Sprintf(`table inet flaky {
	chain refuse { counter reject with tcp reset; }
	chain lose { counter drop; }
	chain input {
		type filter hook input priority -10;
		ip daddr %s tcp dport %d tcp flags & (syn | ack) == syn numgen random mod 20 vmap { 0 : jump refuse, 1 : jump lose }
	}
}`, victim.Addr4, monitorPort)
	if b, err := victim.Exec(s.ctx, "nft", rules); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	before := s.waitScrape(t, hc, victim, nil)
	faults := out.Count("Entering FAULT STATE")

	deadline := time.Now().Add(flakyFor)
	for time.Now().Before(deadline) {
		for _, v := range kept {
			h, err := s.c.Holder(v)
			if err != nil {
				t.Fatal(err)
			}
			if h != victim {
				t.Fatalf("%s moved from %s to %v while its service only lost a tenth of the connections\n%s", v, victim.Name, h, out)
			}
		}
		select {
		case <-s.ctx.Done():
			t.Fatal(s.ctx.Err())
		case <-time.After(lab.PollInterval):
		}
	}
	if n := out.Count("Entering FAULT STATE"); n != faults {
		t.Errorf("keepalived on %s entered FAULT %d times while the service was flaky", victim.Name, n-faults)
	}

	// The check met the failures: both rules matched, and they were counted.
	counters, err := victim.Exec(s.ctx, "nft", "list", "table", "inet", "flaky")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %s:\n%s", flakyFor, counters)
	if strings.Count(string(counters), "counter packets 0 ") > 0 {
		t.Errorf("a rule never matched: the service was not flaky both ways\n%s", counters)
	}
	after := s.waitScrape(t, hc, victim, nil)
	failures := probes(after, "failure") - probes(before, "failure")
	successes := probes(after, "success") - probes(before, "success")
	t.Logf("probes in %s: %d succeeded, %d failed", flakyFor, successes, failures)
	// 6.7 probes a second at 150 ms; one in ten fails.
	if successes < 330 || failures < 20 {
		t.Errorf("the check probed %d times successfully and %d times in vain in %s, want about 400 and 40", successes, failures, flakyFor)
	}
	if up := after.value("ipfailover_check_up", nil); up != 1 {
		t.Errorf("ipfailover_check_up = %v on %s, want 1", up, victim.Name)
	}

	// Now the service stops: the VIPs move.
	if err := s.httpd[victim].Kill(); err != nil {
		t.Fatal(err)
	}
	m := s.waitOne(vips4, func(m lab.HolderMap) bool { return !m.Holds(victim) })
	t.Logf("httpd stopped on %s: %s", victim.Name, m)
	s.waitScrape(t, hc, victim, func(m *scrape) error {
		if up := m.value("ipfailover_check_up", nil); up != 0 {
			return fmt.Errorf("ipfailover_check_up = %v, want 0", up)
		}
		return nil
	})
}

// probes is the number of probes with result in a scrape.
func probes(m *scrape, result string) int {
	for _, s := range m.fams["ipfailover_check_duration_seconds"].GetMetric() {
		if labelMap(s)["result"] == result {
			return int(s.GetHistogram().GetSampleCount())
		}
	}
	return 0
}
