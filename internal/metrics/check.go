package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CheckMetrics are the series of the built-in port check (internal/check):
// whether it passes and how long its probes take. The check records into
// it (check.Recorder); Options.Check serves it.
type CheckMetrics struct {
	up       prometheus.Gauge
	duration *prometheus.HistogramVec
	// failing is set while the check has decided that it fails (9
	// failures in a row since the start or since it passed).
	failing atomic.Bool
}

// NewCheckMetrics makes the series: the check failing (as it starts) and no
// probe yet.
func NewCheckMetrics() *CheckMetrics {
	m := &CheckMetrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipfailover_check_up",
			Help: "1 when the built-in check of OPENSHIFT_HA_MONITOR_PORT passes and keepalived may hold VIPs on this node, 0 when it fails.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ipfailover_check_duration_seconds",
			Help: "Time each probe of the built-in check took to connect, or to fail (refused, or given up at the timeout), by result.",
			// From a local connect's fraction of a millisecond to the
			// probe's timeout (0.1 s).
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1},
		}, []string{"result"}),
	}
	// Both results are there from the start, so rates work at once.
	m.duration.WithLabelValues("success")
	m.duration.WithLabelValues("failure")
	return m
}

// Probed records one probe.
func (m *CheckMetrics) Probed(took time.Duration, err error) {
	result := "success"
	if err != nil {
		result = "failure"
	}
	m.duration.WithLabelValues(result).Observe(took.Seconds())
}

// Passing records a change of the check's state, or that a check that
// fails from the start has confirmed it.
func (m *CheckMetrics) Passing(passing bool) {
	v := 0.0
	if passing {
		v = 1
	}
	m.up.Set(v)
	m.failing.Store(!passing)
}

// Failing says whether the check has decided that it fails: before it
// first answers, or while it passes, keepalived's FAULT is not the
// check's.
func (m *CheckMetrics) Failing() bool { return m.failing.Load() }

// Describe implements prometheus.Collector.
func (m *CheckMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.up.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *CheckMetrics) Collect(ch chan<- prometheus.Metric) {
	m.up.Collect(ch)
	m.duration.Collect(ch)
}
