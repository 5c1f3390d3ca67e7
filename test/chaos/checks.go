package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

// Check is one invariant at the end of a run.
type Check struct {
	Name string
	OK   bool
	// Detail is what was found.
	Detail string
}

// holderChecks: every VIP on exactly one node.
func holderChecks(vips []netip.Addr, holders map[netip.Addr][]string) []Check {
	var checks []Check
	for _, v := range vips {
		h := holders[v]
		checks = append(checks, Check{Name: v.String() + " is held by exactly one node", OK: len(h) == 1, Detail: fmt.Sprintf("held by %v", h)})
	}
	return checks
}

// readyAndChecked is nil when the ipfailover of the node at addr answers
// /readyz with 200 and its check passes (see checkPasses): one try of a
// wait for the node to be back.
func readyAndChecked(ctx context.Context, c *lab.Cluster, addr netip.Addr) error {
	if _, err := c.Get(ctx, fmt.Sprintf("http://%s/readyz", netip.AddrPortFrom(addr, 9650))); err != nil {
		return err
	}
	metrics, err := c.Get(ctx, fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(addr, 9650)))
	if err != nil {
		return err
	}
	return checkPasses(metrics)
}

// checkPasses is nil when metrics, a node's /metrics page, says its
// built-in check passes (ipfailover_check_up 1). Until then keepalived
// keeps the node's instances in FAULT: its service answering again is
// not yet a backup ready to take a VIP, which needs the check's passes in
// a row.
func checkPasses(metrics string) error {
	for line := range strings.Lines(metrics) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ipfailover_check_up "); ok {
			if v == "1" {
				return nil
			}
			return fmt.Errorf("ipfailover_check_up is %s", v)
		}
	}
	return errors.New("no ipfailover_check_up in the metrics")
}

// metricsChecks scrapes a node's /metrics and compares it with the
// holders: ipfailover_vip_held is 1 exactly for the VIPs the node holds,
// keepalived is MASTER (keepalived_vrrp_state 2) exactly for their
// instances, and no VIP is reported on two nodes (ipfailover_vip_duplicate
// 0). From the same page, ipfailover's CPU since it started (cpuCheck).
func metricsChecks(ctx context.Context, hc *http.Client, node, url string, vips []netip.Addr, holders map[netip.Addr][]string, conf *keepalived.Conf) []Check {
	fams, err := scrapeMetrics(ctx, hc, url)
	if err != nil {
		return []Check{{Name: node + ": /metrics answers", Detail: err.Error()}}
	}
	return []Check{holdersCheck(node, fams, vips, holders, conf), cpuCheck(node, fams, time.Now())}
}

// maxCPUShare is the most of a core ipfailover may have used, on average,
// from its start to the end of a run. A node's silence at its own address
// and its slow answers are not held against the failover (see
// Data.silentSpans, Data.atDeadline): they are taken for the machine's or
// a fault's starving. A process of ours that spins (a loop on a bad
// netlink message, renders without end) would starve its node itself;
// this check keeps that from passing for the machine's doing.
const maxCPUShare = 0.2

// cpuCheck reads ipfailover's own CPU from fams, a node's /metrics (the
// process collector's process_cpu_seconds_total over the time since
// process_start_time_seconds, at now): at most maxCPUShare of a core.
func cpuCheck(node string, fams map[string]*dto.MetricFamily, now time.Time) Check {
	c := Check{Name: fmt.Sprintf("%s: ipfailover used at most %.0f %% of a core since it started", node, 100*maxCPUShare)}
	cpu, start := fams["process_cpu_seconds_total"].GetMetric(), fams["process_start_time_seconds"].GetMetric()
	if len(cpu) != 1 || len(start) != 1 {
		c.Detail = "no process_cpu_seconds_total or process_start_time_seconds in the metrics"
		return c
	}
	used := time.Duration(cpu[0].GetCounter().GetValue() * float64(time.Second))
	up := now.Sub(time.Unix(0, int64(start[0].GetGauge().GetValue()*float64(time.Second))))
	if up <= 0 {
		c.Detail = fmt.Sprintf("started %s after the scrape", -up)
		return c
	}
	share := float64(used) / float64(up)
	c.OK = share <= maxCPUShare
	c.Detail = fmt.Sprintf("%.1f %% (%s of CPU in %s)", 100*share, used.Round(time.Millisecond), up.Round(time.Second))
	return c
}

// holdersCheck compares a node's metrics (fams) with the holders: see
// metricsChecks.
func holdersCheck(node string, fams map[string]*dto.MetricFamily, vips []netip.Addr, holders map[netip.Addr][]string, conf *keepalived.Conf) Check {
	c := Check{Name: node + ": metrics agree with the holders (vip_held, vrrp_state, vip_duplicate)"}
	var wrong []string
	held := map[string]float64{}
	for _, m := range fams["ipfailover_vip_held"].GetMetric() {
		held[label(m, "vip")] = m.GetGauge().GetValue()
	}
	state := map[string]float64{}
	for _, m := range fams["keepalived_vrrp_state"].GetMetric() {
		state[label(m, "name")] = m.GetGauge().GetValue()
	}
	for _, v := range vips {
		holds := slices.Contains(holders[v], node)
		want := 0.0
		if holds {
			want = 1
		}
		if got, ok := held[v.String()]; !ok || got != want {
			wrong = append(wrong, fmt.Sprintf("ipfailover_vip_held{vip=%q} = %v, want %v", v, held[v.String()], want))
		}
		if conf == nil {
			continue
		}
		in := conf.InstanceOf(v)
		if in == nil {
			wrong = append(wrong, fmt.Sprintf("no instance for %s in keepalived.conf", v))
			continue
		}
		if st := state[in.Name]; (st == 2) != holds {
			wrong = append(wrong, fmt.Sprintf("keepalived_vrrp_state{name=%q} = %v while the node %s the VIP", in.Name, st, map[bool]string{true: "holds", false: "does not hold"}[holds]))
		}
	}
	for _, m := range fams["ipfailover_vip_duplicate"].GetMetric() {
		if m.GetGauge().GetValue() != 0 {
			wrong = append(wrong, fmt.Sprintf("ipfailover_vip_duplicate{vip=%q,mac=%q} = %v", label(m, "vip"), label(m, "mac"), m.GetGauge().GetValue()))
		}
	}
	c.OK = len(wrong) == 0
	c.Detail = strings.Join(wrong, "; ")
	return c
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func scrapeMetrics(ctx context.Context, hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(string(body)))
}
