package e2e

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

const (
	// kubeletProbe is the readiness probe's period in deploy/base.
	kubeletProbe = 5 * time.Second
	// scrapeInterval is a Prometheus scrape's.
	scrapeInterval = 15 * time.Second
	// restFor is how long TestLogAtRest watches the fleet at rest: past
	// the minute after which a failing check says so again.
	restFor = 65 * time.Second
	// tail is how many lines `kubectl logs` shows with a selector.
	tail = 10
)

// TestLogAtRest: two healthy nodes and one whose check fails from the start
// (nothing listens on its OPENSHIFT_HA_MONITOR_PORT) are probed for readiness
// every 5 s, as the kubelet does, and scraped every 15 s, for a minute after
// they settled. keepalived dumps its state for each, and none of its dump
// notices reaches the log; no line repeats. The failing node says why it
// holds no VIPs when its check decides and once more a minute later, never
// more often, so its last 10 lines say why.
func TestLogAtRest(t *testing.T) {
	s := newScenario(t)
	healthy, failing := s.c.Nodes[:2], s.c.Nodes[2]
	outs := map[*lab.Node]*lab.Output{}
	for _, n := range healthy {
		_, outs[n] = s.start(n, env(vips4Env))
	}
	_, outs[failing] = s.start(failing, env(vips4Env, "OPENSHIFT_HA_MONITOR_PORT=9999"))
	s.waitOne(vips4, nil)
	s.waitFor("the failing check's first line", func() (bool, error) {
		return outs[failing].Count("check fails from the start") == 1, nil
	})
	time.Sleep(settle)

	marks := map[*lab.Node]int{}
	for n, o := range outs {
		marks[n] = len(o.String())
	}
	hc := s.c.HTTPClient()
	end := time.Now().Add(restFor)
	for i := 0; time.Now().Before(end); i++ {
		for _, n := range s.c.Nodes {
			if code, body, err := httpGet(s.ctx, hc, metricsURL(n, "/readyz")); err != nil || code != http.StatusOK {
				t.Errorf("%s /readyz: %d %q %v", n.Name, code, body, err)
			}
			if time.Duration(i)*kubeletProbe%scrapeInterval == 0 {
				if _, err := scrapeNode(s.ctx, hc, n); err != nil {
					t.Error(err)
				}
			}
		}
		select {
		case <-s.ctx.Done():
			t.Fatal(s.ctx.Err())
		case <-time.After(kubeletProbe):
		}
	}

	for _, n := range s.c.Nodes {
		m := s.waitScrape(t, hc, n, nil)
		dumps := m.fams["ipfailover_keepalived_dump_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount()
		if least := uint64(restFor / kubeletProbe); dumps < least {
			t.Errorf("%s: keepalived dumped its state %d times, want at least %d (one per probe)", n.Name, dumps, least)
		}
		all := outs[n].String()
		if c := strings.Count(all, "Printing VRRP as json"); c > 0 {
			t.Errorf("%s: %d of keepalived's dump notices in the log", n.Name, c)
		}
		rest := all[marks[n]:]
		t.Logf("%s at rest for %s:\n%s", n.Name, restFor, rest)
		if d := repeated(rest); len(d) > 0 {
			t.Errorf("%s at rest repeats these lines:\n%s", n.Name, strings.Join(d, "\n"))
		}
	}

	out := outs[failing].String()
	if c := strings.Count(out, `msg="check fails`); c != 2 {
		t.Errorf("%s said %d times that its check fails in %s, want 2 (as it decided, and a minute later)", failing.Name, c, restFor)
	}
	if strings.Contains(out, "holds instances in FAULT") {
		t.Errorf("%s told a FAULT that is the check's", failing.Name)
	}
	last := lastLines(out, tail)
	why := regexp.MustCompile(`msg="check fails.*setting=OPENSHIFT_HA_MONITOR_PORT.*last_error=".*:9999: connection refused"`)
	if !why.MatchString(last) {
		t.Errorf("%s's last %d lines do not say why it holds no VIPs:\n%s", failing.Name, tail, last)
	}
}

// logTime is the time at the start of a line: slog's or keepalived's.
var logTime = regexp.MustCompile(`^(time=\S+ |[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4}: )`)

// repeated returns the lines of out, without their times, that appear more
// than once.
func repeated(out string) []string {
	seen := map[string]int{}
	var twice []string
	for line := range strings.SplitSeq(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		line = logTime.ReplaceAllString(line, "")
		seen[line]++
		if seen[line] == 2 {
			twice = append(twice, line)
		}
	}
	return twice
}
