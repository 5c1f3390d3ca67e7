package metrics

import (
	"log/slog"
	"net/netip"
	"runtime"
	"strconv"
	"sync"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/proc"
	"github.com/prometheus/client_golang/prometheus"
)

// Keepalived is the supervised keepalived process.
type Keepalived interface {
	// PID is keepalived's (parent) process id, 0 when none runs.
	PID() int
	// Restarts counts how often keepalived was started again after the first start.
	Restarts() int
	// Running reports whether keepalived runs now.
	Running() bool
}

// stateLabel is the exporter's "state" label: the state name, empty for a state it does not know.
func stateLabel(s int) string {
	switch s {
	case keepalived.StateInit:
		return "INIT"
	case keepalived.StateBackup:
		return "BACKUP"
	case keepalived.StateMaster:
		return "MASTER"
	case keepalived.StateFault:
		return "FAULT"
	}
	return ""
}

// vrrpCounters are keepalived's per-instance statistics, exported as keepalived_vrrp_<field>
// with keepalived_exporter's help texts. Each reads the JSON field of the same name.
var vrrpCounters = [...]struct{ field, help string }{
	{"advert_rcvd", "Advertisements received"},
	{"advert_sent", "Advertisements sent"},
	{"become_master", "Became master"},
	{"release_master", "Released master"},
	{"packet_len_err", "Packet length errors"},
	{"advert_interval_err", "Advertisement interval errors"},
	{"ip_ttl_err", "TTL errors"},
	{"invalid_type_rcvd", "Invalid type errors"},
	{"addr_list_err", "Address list errors"},
	{"invalid_authtype", "Authentication invalid"},
	{"authtype_mismatch", "Authentication mismatch"},
	{"auth_failure", "Authentication failure"},
	{"pri_zero_rcvd", "Priority zero received"},
	{"pri_zero_sent", "Priority zero sent"},
}

// Error sources in ipfailover_scrape_errors_total.
const (
	sourceDump = "keepalived_dump"
	sourceVIPs = "vip_list"
)

// collector turns keepalived's JSON dump, the kernel's addresses and the supervisor's state
// into metrics at scrape time.
type collector struct {
	keepalived Keepalived
	proc       proc.FS
	vips       host.Lister
	iface      string
	allVIPs    []netip.Addr
	instances  []config.Instance
	dumper     *dumper
	log        *slog.Logger

	up           *prometheus.Desc
	counters     []*prometheus.Desc
	state        *prometheus.Desc
	vipHeld      *prometheus.Desc
	restarts     *prometheus.Desc
	transition   *prometheus.Desc
	configInfo   *prometheus.Desc
	configLabels []string
	buildInfo    *prometheus.Desc
	version      string

	scrapeErrors *prometheus.CounterVec
	dumpDuration prometheus.Histogram
	// refused and evicted count what the listener's bounds turned away.
	refused prometheus.Counter
	evicted prometheus.Counter

	mu          sync.Mutex
	transitions map[string]transition
}

// transition is the last state change seen for an instance.
type transition struct {
	intf  string
	vrid  int
	state int
	at    float64
}

func newCollector(o Options, d *dumper) *collector {
	vrrpLabels := []string{"name", "intf", "vrid", "state"}
	c := &collector{
		keepalived:  o.Keepalived,
		proc:        o.Proc,
		vips:        o.VIPs,
		instances:   o.Plan.Instances,
		iface:       o.Plan.Node.Interface,
		allVIPs:     o.Plan.Config.VIPs,
		dumper:      d,
		log:         o.Logger,
		version:     o.Version,
		transitions: make(map[string]transition),

		up: prometheus.NewDesc("keepalived_up", "Status", nil, nil),
		state: prometheus.NewDesc("keepalived_vrrp_state",
			"VRRP instance state from keepalived: 0 INIT, 1 BACKUP, 2 MASTER, 3 FAULT. One series per instance, whatever the state.",
			[]string{"name", "intf", "vrid"}, nil),
		vipHeld: prometheus.NewDesc("ipfailover_vip_held",
			"1 when the kernel has this configured VIP on the interface now, else 0.",
			[]string{"vip", "instance", "intf"}, nil),
		restarts: prometheus.NewDesc("ipfailover_keepalived_restarts_total",
			"Times keepalived was started again after it exited.", nil, nil),
		transition: prometheus.NewDesc("ipfailover_vrrp_last_transition_timestamp_seconds",
			"Time of the last VRRP state change seen for the instance, in seconds since the epoch.",
			[]string{"name", "intf", "vrid"}, nil),
		configInfo: prometheus.NewDesc("ipfailover_config_info",
			"The effective configuration; always 1.",
			[]string{"config_name", "interface", "instances", "vrid_range", "vrrp_mode", "preemption"}, nil),
		buildInfo: prometheus.NewDesc("ipfailover_build_info",
			"Version of this program and the Go release that built it; always 1.",
			[]string{"version", "goversion"}, nil),

		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipfailover_scrape_errors_total",
			Help: "Scrapes that could not read a source: keepalived_dump or vip_list.",
		}, []string{"source"}),
		dumpDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ipfailover_keepalived_dump_duration_seconds",
			Help:    "Time from signalling keepalived to a complete JSON dump, including failed attempts.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipfailover_metrics_scrapes_refused_total",
			Help: "GET /metrics answered 503: the most scrapes served at once were under way for as long as a scrape waits for one to end.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ipfailover_metrics_connections_evicted_total",
			Help: "Connections to the metrics port closed to make room for a new one, the open connections being at their bound; those that never sent a request go first.",
		}),
	}
	for _, v := range vrrpCounters {
		c.counters = append(c.counters, prometheus.NewDesc("keepalived_vrrp_"+v.field, v.help, vrrpLabels, nil))
	}
	c.scrapeErrors.WithLabelValues(sourceDump)
	d.duration = c.dumpDuration
	c.scrapeErrors.WithLabelValues(sourceVIPs)

	p := o.Plan
	vridRange := ""
	if len(p.Instances) > 0 {
		lo, hi := p.Instances[0].RouterID, p.Instances[0].RouterID
		for _, in := range p.Instances {
			lo, hi = min(lo, in.RouterID), max(hi, in.RouterID)
		}
		vridRange = strconv.Itoa(int(lo)) + "-" + strconv.Itoa(int(hi))
	}
	c.configLabels = []string{p.Config.Name, p.Node.Interface, strconv.Itoa(len(p.Instances)), vridRange, p.Mode(), p.Config.Preemption.String()}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	for _, d := range c.counters {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.state, c.vipHeld, c.restarts, c.transition, c.configInfo, c.buildInfo} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
	c.dumpDuration.Describe(ch)
	c.refused.Describe(ch)
	c.evicted.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.collectKeepalived(ch)
	c.collectVIPs(ch)
	ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(c.keepalived.Restarts()))
	ch <- prometheus.MustNewConstMetric(c.configInfo, prometheus.GaugeValue, 1, c.configLabels...)
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, c.version, runtime.Version())
	c.scrapeErrors.Collect(ch)
	c.dumpDuration.Collect(ch)
	c.refused.Collect(ch)
	c.evicted.Collect(ch)
}

// collectKeepalived sends keepalived_up once, and the per-instance series when the dump worked.
func (c *collector) collectKeepalived(ch chan<- prometheus.Metric) {
	var (
		d   *dump
		err error
	)
	// A stopped, vanished or zombie keepalived gets no signal: it cannot answer.
	if alive(c.proc, c.keepalived) != nil {
		err = errNotRunning
	} else {
		d, err = c.dumper.get(c.keepalived.PID())
	}
	if err != nil {
		if err != errNotRunning {
			c.scrapeErrors.WithLabelValues(sourceDump).Inc()
			c.log.Warn("reading keepalived's JSON dump", "err", err)
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		c.collectTransitions(ch)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, in := range d.instances {
		vrid := strconv.Itoa(in.Data.VRID)
		state := stateLabel(in.Data.State)
		for i, v := range vrrpCounters {
			ch <- prometheus.MustNewConstMetric(c.counters[i], prometheus.CounterValue,
				float64(in.Stats[v.field]), in.Data.Name, in.Data.Interface, vrid, state)
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, float64(in.Data.State),
			in.Data.Name, in.Data.Interface, vrid)
	}
	c.observe(d)
	c.collectTransitions(ch)
}

// observe records state changes between dumps. keepalived's own last_transition gives the time
// when it has one; otherwise the dump's time is the best known bound.
func (c *collector) observe(d *dump) {
	c.mu.Lock()
	defer c.mu.Unlock()
	current := make(map[string]bool, len(d.instances))
	for _, in := range d.instances {
		current[in.Data.Name] = true
	}
	// An instance that a reload removed has no transitions any more.
	for name := range c.transitions {
		if !current[name] {
			delete(c.transitions, name)
		}
	}
	for _, in := range d.instances {
		prev, seen := c.transitions[in.Data.Name]
		at := in.Data.LastTransition
		if at <= 0 {
			at = float64(d.at.UnixNano()) / 1e9
		}
		if seen && prev.state == in.Data.State && (in.Data.LastTransition <= 0 || prev.at == at) {
			continue
		}
		c.transitions[in.Data.Name] = transition{intf: in.Data.Interface, vrid: in.Data.VRID, state: in.Data.State, at: at}
	}
}

func (c *collector) collectTransitions(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, t := range c.transitions {
		ch <- prometheus.MustNewConstMetric(c.transition, prometheus.GaugeValue, t.at, name, t.intf, strconv.Itoa(t.vrid))
	}
}

// collectVIPs reports, per configured VIP, whether the kernel has it on the interface.
func (c *collector) collectVIPs(ch chan<- prometheus.Metric) {
	if c.vips == nil {
		return
	}
	held, err := host.HeldVIPs(c.vips, c.iface, c.allVIPs)
	if err != nil {
		c.scrapeErrors.WithLabelValues(sourceVIPs).Inc()
		c.log.Warn("listing addresses", "interface", c.iface, "err", err)
		return
	}
	on := make(map[netip.Addr]bool, len(held))
	for _, v := range held {
		on[v] = true
	}
	for _, in := range c.instances {
		for _, vip := range in.VIPs {
			v := 0.0
			if on[vip] {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.vipHeld, prometheus.GaugeValue, v, vip.String(), in.Name, in.Interface)
		}
	}
}
