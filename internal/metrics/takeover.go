package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipfailover/ipfailover/internal/splitbrain"
)

// TakeoverMetrics are the series of the VIPs this node takes and gives
// up, as the split-brain guard tells them (splitbrain.Options Took and
// Released): how long a takeover took, from the last advert heard from the
// previous master, and how many moves there were, by cause.
type TakeoverMetrics struct {
	took  *prometheus.HistogramVec
	moves *prometheus.CounterVec
}

// takeoverBuckets run from a hand-over's few hundredths of a second to a
// slow fleet's master-down interval and more.
var takeoverBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.5, 2, 3, 4, 5, 10}

// NewTakeoverMetrics makes the series, every cause there from the start so
// that rates work at once.
func NewTakeoverMetrics() *TakeoverMetrics {
	m := &TakeoverMetrics{
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ipfailover_takeover_seconds",
			Help:    "Time from the last advert this node heard from an instance's previous master to this node's MASTER transition (stage master) and to its first announcement of the VIPs, a gratuitous ARP or unsolicited neighbour advertisement (stage announced), by cause: silent (the master fell silent: dead, frozen, cut off), handover (it said goodbye with priority 0: stopped, or its check failed), preemption (this node took it back). A client's outage is about the announced stage.",
			Buckets: takeoverBuckets,
		}, []string{"cause", "stage"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipfailover_vip_moves_total",
			Help: "VRRP instances (VIP groups) this node took (direction taken: cause start, handover, silent or preemption) or gave up (direction released: cause stop, fault or higher-priority).",
		}, []string{"cause", "direction"}),
	}
	for _, c := range []string{splitbrain.CauseHandover, splitbrain.CauseSilent, splitbrain.CausePreemption} {
		for _, s := range []string{"master", "announced"} {
			m.took.WithLabelValues(c, s)
		}
	}
	for _, c := range []string{splitbrain.CauseStart, splitbrain.CauseHandover, splitbrain.CauseSilent, splitbrain.CausePreemption} {
		m.moves.WithLabelValues(c, "taken")
	}
	for _, c := range []string{splitbrain.ReleaseStop, splitbrain.ReleaseFault, splitbrain.ReleaseHigherPriority} {
		m.moves.WithLabelValues(c, "released")
	}
	return m
}

// Took records a takeover.
func (m *TakeoverMetrics) Took(t splitbrain.Takeover) {
	m.moves.WithLabelValues(t.Cause, "taken").Inc()
	if t.LastAdvert.IsZero() {
		return
	}
	m.took.WithLabelValues(t.Cause, "master").Observe(t.At.Sub(t.LastAdvert).Seconds())
	if !t.Announced.IsZero() {
		m.took.WithLabelValues(t.Cause, "announced").Observe(t.Announced.Sub(t.LastAdvert).Seconds())
	}
}

// Released records a release.
func (m *TakeoverMetrics) Released(r splitbrain.Release) {
	m.moves.WithLabelValues(r.Cause, "released").Inc()
}

// Describe implements prometheus.Collector.
func (m *TakeoverMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.took.Describe(ch)
	m.moves.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *TakeoverMetrics) Collect(ch chan<- prometheus.Metric) {
	m.took.Collect(ch)
	m.moves.Collect(ch)
}
