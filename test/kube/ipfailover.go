package kube

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/lab"
)

// Metrics scrapes the /metrics of the ipfailover pod on node n (host
// network, port 9650) from the lab's client, as Prometheus would.
func (c *Cluster) Metrics(ctx context.Context, n *lab.Node) (Scrape, error) {
	body, err := c.lab.Get(ctx, fmt.Sprintf("http://%s:9650/metrics", n.Addr4))
	if err != nil {
		return nil, fmt.Errorf("%s: GET /metrics: %w", n.Name, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: parsing /metrics: %w", n.Name, err)
	}
	return fams, nil
}

// Scrape is one parsed /metrics response.
type Scrape map[string]*dto.MetricFamily

// Sum adds up the series of name whose labels include want (nil: all).
func (s Scrape) Sum(name string, want map[string]string) float64 {
	var sum float64
	for _, m := range s.series(name, want) {
		switch {
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Histogram adds up the histograms of name whose labels include want: the
// observations' count and sum, and the cumulative count per upper bound.
func (s Scrape) Histogram(name string, want map[string]string) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = map[float64]uint64{}
	for _, m := range s.series(name, want) {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		count += h.GetSampleCount()
		sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	return count, sum, buckets
}

// Count is the number of series of name whose labels include want.
func (s Scrape) Count(name string, want map[string]string) int { return len(s.series(name, want)) }

func (s Scrape) series(name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range s[name].GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// LogTimes returns the times of the lines of an ipfailover log (log/slog's
// text: time=... level=... msg=...) whose message is msg and that contain
// every one of with.
func LogTimes(logs []byte, msg string, with ...string) []time.Time {
	var out []time.Time
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "msg="+msg) && !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		ok := true
		for _, w := range with {
			ok = ok && strings.Contains(line, w)
		}
		ts, _, found := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || !found || !strings.HasPrefix(line, "time=") {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// FollowLogs follows the logs of pods in namespace from now on (a pod's log
// goes with the pod); the function it returns waits until a pod's log ends,
// the pod gone, and returns it.
func (c *Cluster) FollowLogs(ctx context.Context, namespace string, pods []corev1.Pod) func(pod string) []byte {
	logs := map[string]chan []byte{}
	for _, p := range pods {
		ch := make(chan []byte, 1)
		logs[p.Name] = ch
		go func() {
			out, _ := c.Kubectl(ctx, "-n", namespace, "logs", "-f", p.Name)
			ch <- out
		}()
	}
	return func(pod string) []byte {
		ch, ok := logs[pod]
		if !ok {
			return nil
		}
		select {
		case out := <-ch:
			return out
		case <-ctx.Done():
			return nil
		}
	}
}

// WaitReloads is Reloads once every pod of pods has reloaded so, or once
// within has passed (the pods that did not are missing from the map).
func (c *Cluster) WaitReloads(ctx context.Context, namespace string, pods []corev1.Pod, addr netip.Addr, change string, since time.Time, within time.Duration) (map[string][]time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		out, err := c.Reloads(ctx, namespace, pods, addr, change, since)
		if err != nil || len(out) == len(pods) || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Reloads returns, per pod of pods, the times at or after since at which
// its ipfailover reloaded keepalived with addr added or removed (change),
// as its log says ("reloaded keepalived ... added=[addr]").
func (c *Cluster) Reloads(ctx context.Context, namespace string, pods []corev1.Pod, addr netip.Addr, change string, since time.Time) (map[string][]time.Time, error) {
	out := map[string][]time.Time{}
	for _, p := range pods {
		logs, err := c.Kubectl(ctx, "-n", namespace, "logs", p.Name)
		if err != nil {
			return nil, fmt.Errorf("logs of %s: %w", p.Name, err)
		}
		for _, t := range LogTimes(logs, "reloaded keepalived", change+"=["+addr.String()+"]") {
			if !t.Before(since) {
				out[p.Name] = append(out[p.Name], t)
			}
		}
	}
	return out, nil
}
