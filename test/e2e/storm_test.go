package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// The address storm: a busy node changes thousands of addresses while
// ipfailover, PID 1 of its pod, is not running (stopped, as a starved or
// paused process is), so the kernel overflows its address subscription and
// ends it. Once resumed, ipfailover must live on, and with it the guard
// that removes a stray VIP; keepalived ran all along, so the VIP stays on
// one node.
//
// IPFAILOVER_E2E_STORMS sets the number of rounds (1 unless set), each a
// storm on the VIP's holder and one on a backup.

const (
	// stormStop is how long ipfailover stays stopped, the storm included.
	stormStop = 2 * time.Second
	// stormWatch is how long after the resume the VIP must have one
	// holder; stormQuiet how long after that no second node may hold it.
	stormWatch = 10 * time.Second
	stormQuiet = 2 * time.Second
	// strayBound is how soon a stray VIP must be gone from a BACKUP: the
	// guard waits two advert intervals, the rest is margin.
	strayBound = 5 * time.Second
	// overflowsMetric counts the overflows of ipfailover's address watch.
	overflowsMetric = "ipfailover_address_watch_overflows_total"
)

func TestAddressStorm(t *testing.T) {
	rounds := envInt(t, "IPFAILOVER_E2E_STORMS", 1)
	t.Logf("IPFAILOVER_E2E_STORMS=%d", rounds)
	perStorm := stormStop + stormWatch + stormQuiet + strayBound + agreeTimeout
	s := newScenarioWith(t, lab.Options{}, scenarioTimeout+time.Duration(2*rounds)*perStorm)
	vip := vips4[0]
	vips := []netip.Addr{vip}
	f := s.fleet(env(vip.String()), vips)
	hc := s.c.HTTPClient()
	for round := range rounds {
		holder := s.waitOne(vips, nil)[vip]
		backup := others(s.c, holder)[round%2]
		s.storm(t, hc, f, vip, holder, false)
		s.storm(t, hc, f, vip, backup, true)
		if t.Failed() {
			t.Fatalf("round %d of %d failed", round+1, rounds)
		}
		t.Logf("round %d of %d: storms on %s (holder) and %s (backup) passed", round+1, rounds, holder.Name, backup.Name)
	}
}

// storm stops n's ipfailover (only PID 1: keepalived runs on), adds and
// removes lab.StormAddrs addresses on n's eth0, resumes it after stormStop,
// and requires: the same ipfailover alive throughout, one holder of vip
// stormWatch after the resume and never two for stormQuiet more, /healthz
// 200, the storm seen by ipfailover as an overflow of its address watch,
// and on a backup a stray copy of vip removed within strayBound.
func (s *scenario) storm(t *testing.T, hc *http.Client, f *lab.Fleet, vip netip.Addr, n *lab.Node, backup bool) {
	t.Helper()
	p := f.Proc(n)
	role := "holder"
	if backup {
		role = "backup"
	}
	if p.Exited() {
		t.Fatalf("ipfailover on %s (%s) exited before the storm", n.Name, role)
	}
	// Exited, the process's output is the evidence: the panic, if any.
	dead := func(when string) {
		t.Helper()
		if !p.Exited() {
			return
		}
		code, _ := p.Wait(context.Background())
		out := f.Outputs[0]
		for i, q := range f.Procs {
			if q == p {
				out = f.Outputs[i]
			}
		}
		t.Fatalf("ipfailover (pid %d) on %s (%s) exited %d %s; its last lines:\n%s", p.Pid, n.Name, role, code, when, lastLines(out.String(), 30))
	}

	overflows := s.waitScrape(t, hc, n, nil).value(overflowsMetric, nil)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP to ipfailover on %s: %v", n.Name, err)
	}
	stopped := time.Now()
	serr := n.AddressStorm(s.ctx, lab.StormAddrs, nil)
	stormed := time.Since(stopped)
	if serr == nil {
		serr = sleepCtx(s.ctx, stormStop-stormed)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT to ipfailover on %s: %v", n.Name, err)
	}
	resumed := time.Now()
	if serr != nil {
		t.Fatal(serr)
	}
	t.Logf("%s (%s): ipfailover pid %d stopped %v, %d addresses added and removed on %s in %v",
		n.Name, role, p.Pid, resumed.Sub(stopped).Round(time.Millisecond), lab.StormAddrs, lab.Link, stormed.Round(time.Millisecond))

	// stormWatch: ipfailover alive; holder changes logged.
	last := ""
	for time.Since(resumed) < stormWatch {
		dead(fmt.Sprintf("%v after the resume", time.Since(resumed).Round(time.Millisecond)))
		hs, err := s.c.Holders(vip)
		if err != nil {
			t.Fatal(err)
		}
		if now := nodeNames(hs); now != last {
			t.Logf("%v after the resume: %s on [%s]", time.Since(resumed).Round(time.Millisecond), vip, now)
			last = now
		}
		if err := sleepCtx(s.ctx, lab.PollInterval); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.c.Holder(vip)
	if err != nil || h == nil {
		t.Fatalf("%v after the storm on %s (%s): holder of %s %v %v, want exactly one", stormWatch, n.Name, role, vip, h, err)
	}
	for quiet := time.Now(); time.Since(quiet) < stormQuiet; {
		dead("after the storm")
		if hs, err := s.c.Holders(vip); err != nil || len(hs) > 1 {
			t.Fatalf("%s on [%s] (%v) after the storm on %s (%s), want one node", vip, nodeNames(hs), err, n.Name, role)
		}
		if err := sleepCtx(s.ctx, lab.PollInterval); err != nil {
			t.Fatal(err)
		}
	}

	s.poll(t, n.Name+"'s /healthz 200 after the storm", func(ctx context.Context) error {
		code, body, err := httpGet(ctx, hc, metricsURL(n, "/healthz"))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %q", code, strings.TrimSpace(body))
		}
		return err
	})

	// A storm the watch absorbed would test nothing.
	s.waitScrape(t, hc, n, func(m *scrape) error {
		if got := m.value(overflowsMetric, nil); got <= overflows {
			return fmt.Errorf("%s: %s %v, %v before the storm: the storm did not overflow the address watch", n.Name, overflowsMetric, got, overflows)
		}
		return nil
	})

	if backup {
		if h == n {
			t.Fatalf("%s, stormed as a backup, holds %s", n.Name, vip)
		}
		added := time.Now()
		if _, err := n.Exec(s.ctx, "ip", "addr", "add", vip.String()+"/32", "dev", lab.Link); err != nil {
			t.Fatal(err)
		}
		s.pollFast(t, "the stray "+vip.String()+" removed from "+n.Name, func(context.Context) error {
			has, err := n.Has(vip)
			if err == nil && has {
				err = fmt.Errorf("%s still has %s", n.Name, vip)
			}
			return err
		})
		took := time.Since(added)
		if took > strayBound {
			t.Errorf("the stray %s on %s, stormed as a backup, was removed %v after it was added, want within %v", vip, n.Name, took.Round(time.Millisecond), strayBound)
		}
		t.Logf("%s (backup): a stray %s removed %v after it was added", n.Name, vip, took.Round(time.Millisecond))
	}
	dead("at the end of the round")
}

// nodeNames lists ns's names, comma-separated.
func nodeNames(ns []*lab.Node) string {
	var names []string
	for _, n := range ns {
		names = append(names, n.Name)
	}
	return strings.Join(names, ",")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
