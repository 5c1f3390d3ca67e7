package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/host"
)

// componentCollector exports the health of the run's components
// (component.Group): ipfailover_component_up and
// ipfailover_component_failures_total.
type componentCollector struct {
	health   func() []component.Health
	up       *prometheus.Desc
	failures *prometheus.Desc
}

func newComponentCollector(health func() []component.Health) *componentCollector {
	return &componentCollector{
		health: health,
		up: prometheus.NewDesc("ipfailover_component_up",
			"1 while a part of ipfailover's run works (role essential: its failure ends the run; auxiliary: the run goes on without it and /readyz fails), 0 once it failed or while it reports that it cannot work.",
			[]string{"component", "role"}, nil),
		failures: prometheus.NewDesc("ipfailover_component_failures_total",
			"Failures of a part of ipfailover's run: returning or panicking before it was asked to stop, or reporting that it cannot work.",
			[]string{"component"}, nil),
	}
}

func (c *componentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.failures
}

func (c *componentCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.health() {
		up := 0.0
		if h.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, h.Name, h.Role.String())
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(h.Failures), h.Name)
	}
}

// AddrWatch counts what the kernel address watches went through
// (host.Netlink).
type AddrWatch interface {
	WatchStats() host.WatchStats
}

// addrWatchCollector exports ipfailover_address_watch_overflows_total and
// ipfailover_address_watch_reopens_total.
type addrWatchCollector struct {
	w                  AddrWatch
	overflows, reopens *prometheus.Desc
}

func newAddrWatchCollector(w AddrWatch) *addrWatchCollector {
	return &addrWatchCollector{
		w: w,
		overflows: prometheus.NewDesc("ipfailover_address_watch_overflows_total",
			"Times the kernel dropped address notifications for ipfailover because it fell behind (a storm of address changes on the node, or the pod starved of CPU); each is followed by a fresh listing of the addresses.",
			nil, nil),
		reopens: prometheus.NewDesc("ipfailover_address_watch_reopens_total",
			"Times an address notification socket failed (or could not be opened) and was opened again a second later; the addresses are listed again after each.",
			nil, nil),
	}
}

func (c *addrWatchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.overflows
	ch <- c.reopens
}

func (c *addrWatchCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.WatchStats()
	ch <- prometheus.MustNewConstMetric(c.overflows, prometheus.CounterValue, float64(s.Overflows))
	ch <- prometheus.MustNewConstMetric(c.reopens, prometheus.CounterValue, float64(s.Reopens))
}
