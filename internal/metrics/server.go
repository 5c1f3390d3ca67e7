// Package metrics serves Prometheus metrics and health checks for ipfailover.
//
// /metrics keeps github.com/gen2brain/keepalived_exporter's names, labels and help texts
// (keepalived_up, keepalived_vrrp_* with labels name, intf, vrid, state), read from keepalived's
// JSON dump of the supervised process, and adds ipfailover_* series about this program and the
// VIPs the kernel holds. /healthz and /readyz serve the kubelet's probes. From the same dump,
// RemindFaults tells the log about instances that stay in FAULT.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/proc"
)

var errNotRunning = errors.New("keepalived is not running")

// Options configures a Server. Plan, Keepalived and KeepalivedBinary are required; the rest
// has defaults.
type Options struct {
	// Plan is the effective configuration: ipfailover_config_info, and the instances and VIPs
	// of ipfailover_vip_held.
	Plan *plan.Plan

	Keepalived Keepalived
	// KeepalivedBinary is asked for the JSON dump signal (`keepalived --signum=JSON`) unless
	// Signal is set.
	KeepalivedBinary string
	// VIPs lists the kernel's addresses for ipfailover_vip_held; nil leaves that metric out.
	VIPs host.Lister
	// Proc is where keepalived's process state is read; the zero FS is the host's /proc.
	Proc proc.FS
	// SplitBrain is the split-brain guard; nil leaves its metrics out.
	SplitBrain SplitBrain

	// Version of this program, for ipfailover_build_info.
	Version string

	// Check, when set, serves the built-in check's series.
	Check *CheckMetrics
	// Takeovers, when set, serves the VIPs this node took and gave up.
	Takeovers *TakeoverMetrics

	// Membership, when set, serves the unicast peers found in the cluster.
	Membership Membership
	// Bridge, when set, serves the multicast bridge's series.
	Bridge Bridge
	// Components, when set, is the health of the run's components
	// (component.Group.Health): a series each, and /readyz fails while
	// one is down.
	Components func() []component.Health
	// AddrWatch, when set, serves what the kernel address watches went
	// through (host.Netlink).
	AddrWatch AddrWatch

	// Signal is keepalived's JSON dump signal; 0 asks KeepalivedBinary once, at the first
	// scrape.
	Signal syscall.Signal
	// DumpPath is keepalived's JSON dump. Default keepalived.DumpPath().
	DumpPath string
	// DumpTimeout bounds the wait for a complete dump. Default 3s.
	DumpTimeout time.Duration
	// DumpMaxAge is how long a dump serves later scrapes. Default 250ms; negative: never.
	DumpMaxAge time.Duration

	Logger *slog.Logger
}

// Server serves /metrics, /healthz, /readyz and a small index.
type Server struct {
	keepalived Keepalived
	proc       proc.FS
	registry   *prometheus.Registry
	collector  *collector
	handler    http.Handler
	ready      atomic.Bool
	check      *CheckMetrics
	components func() []component.Health
	// checkScript is the check script keepalived runs, if any.
	checkScript string
	log         *slog.Logger
	// conns bounds Serve's open connections; writeTimeout its
	// responses, a scrape's wait for a slot and a rendering's wait for
	// keepalived's dump included.
	conns        *connLimit
	writeTimeout time.Duration
}

// New builds a Server with its own registry.
func New(o Options) (*Server, error) {
	switch {
	case o.Plan == nil:
		return nil, errors.New("metrics: Options.Plan is required")
	case o.Keepalived == nil:
		return nil, errors.New("metrics: Options.Keepalived is required")
	case o.KeepalivedBinary == "" && o.Signal == 0:
		return nil, errors.New("metrics: Options.KeepalivedBinary is required to find the dump signal")
	}
	if o.DumpPath == "" {
		o.DumpPath = keepalived.DumpPath()
	}
	if o.DumpTimeout <= 0 {
		o.DumpTimeout = 3 * time.Second
	}
	if o.DumpMaxAge == 0 {
		o.DumpMaxAge = 250 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	d := &dumper{proc: o.Proc, sig: o.Signal, binary: o.KeepalivedBinary, path: o.DumpPath, timeout: o.DumpTimeout, maxAge: o.DumpMaxAge}
	c := newCollector(o, d)

	reg := prometheus.NewRegistry()
	// The registry runs every Collect on goroutines of its own, out of
	// net/http's reach: a collector that panics (a bug) must not end PID 1.
	safe := func(c prometheus.Collector) prometheus.Collector { return safeCollector{c, o.Logger} }
	if err := reg.Register(safe(c)); err != nil {
		return nil, fmt.Errorf("registering the collector: %w", err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if o.Takeovers != nil {
		if err := reg.Register(safe(o.Takeovers)); err != nil {
			return nil, err
		}
	}
	if o.Check != nil {
		if err := reg.Register(safe(o.Check)); err != nil {
			return nil, fmt.Errorf("registering the check's metrics: %w", err)
		}
	}
	if o.SplitBrain != nil {
		reg.MustRegister(safe(newSplitBrainCollector(o.SplitBrain, o.Plan.Config.VIPs)))
	}
	if o.Membership != nil {
		reg.MustRegister(safe(newMembershipCollector(o.Membership)))
	}
	if o.Bridge != nil {
		reg.MustRegister(safe(newBridgeCollector(o.Bridge)))
	}
	if o.Components != nil {
		reg.MustRegister(safe(newComponentCollector(o.Components)))
	}
	if o.AddrWatch != nil {
		reg.MustRegister(safe(newAddrWatchCollector(o.AddrWatch)))
	}

	s := &Server{keepalived: o.Keepalived, proc: o.Proc, registry: reg, collector: c, check: o.Check, components: o.Components,
		checkScript: checkScript(o.Plan.Config), log: o.Logger,
		conns: newConnLimit(maxConns, c.evicted), writeTimeout: scrapeWait + o.DumpTimeout + slowReader}
	mux := http.NewServeMux()
	// Compression is off: a scrape is small next to the CPU and the
	// garbage a fresh gzip writer per scrape costs on a node. The format
	// is the one thing a scrape can choose: its query string (promhttp's
	// name[] filter) is not honoured, so that every scrape of a format
	// shares one rendering.
	formats := expfmt.DefaultAcceptedFormats()
	render := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:           promLogger{o.Logger},
		ErrorHandling:      promhttp.ContinueOnError,
		DisableCompression: true,
		AcceptedFormats:    formats,
	})
	format := func(r *http.Request) string { return string(expfmt.NegotiateAccept(r.Header, formats...)) }
	shared := newSharedResponse(render, o.DumpMaxAge, format, s.keepalivedState)
	mux.Handle("GET /metrics", newScrapeLimit(shared, maxScrapes, scrapeWait, c.refused))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /{$}", index)
	s.handler = mux
	return s, nil
}

// SetReady marks whether the configuration is written and keepalived started; /readyz
// reports ready only while this is true, keepalived runs, and it runs every instance.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Serve serves on ln until ctx ends, then closes ln and answers the requests under way,
// for up to 5 seconds.
// It bounds its connections, how long each may stay silent, and how large a request's
// header may be (limits.go).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      s.writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.conns.track,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(listen(ln)) }()
	select {
	case err := <-done:
		return fmt.Errorf("metrics: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if err := drain(srv, ln, done, s.conns.busy, 5*time.Second); err != nil {
		return fmt.Errorf("metrics: serving on %s: %w", ln.Addr(), err)
	}
	return nil
}

// keepalivedState names keepalived's process and whether it is alive, so
// that a shared /metrics response never outlives the keepalived it shows.
func (s *Server) keepalivedState() string {
	if err := alive(s.proc, s.keepalived); err != nil {
		return err.Error()
	}
	return "alive " + strconv.Itoa(s.keepalived.PID())
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if err := alive(s.proc, s.keepalived); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// readyz is ready when keepalived runs its instances and every component of the run works
// (Options.Components): the configuration is written, keepalived is alive, and its own JSON dump (shared with /metrics) lists every planned
// instance as MASTER, as a BACKUP that has heard a master, or in FAULT while its check
// fails (the built-in check: once it has failed 9 times in a row). A rollout gated on it stops the next node only once this one takes part in every
// election: the leaving master's priority-0 advert then finds a backup that is listening,
// and in a migration from multicast the unicast nodes already hold the VIPs.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "configuration not written or keepalived not started yet", http.StatusServiceUnavailable)
		return
	}
	if err := alive(s.proc, s.keepalived); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err := s.instancesRunning(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err := s.componentsUp(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// componentsUp fails while a component of the run does not work.
func (s *Server) componentsUp() error {
	if s.components == nil {
		return nil
	}
	var down []string
	for _, h := range s.components() {
		if !h.Up {
			down = append(down, fmt.Sprintf("%s: %v", h.Name, h.Err))
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("a part of ipfailover does not work: %s", strings.Join(down, "; "))
	}
	return nil
}

// instancesRunning checks keepalived's JSON dump for every planned instance: out of INIT,
// and a backup only once it has heard a master.
func (s *Server) instancesRunning() error {
	d, err := s.collector.dumper.get(s.keepalived.PID())
	if err != nil {
		return fmt.Errorf("asking keepalived for its instances: %w", err)
	}
	dumped := make(map[string]keepalived.VRRPInstance, len(d.instances))
	for _, in := range d.instances {
		dumped[in.Data.Name] = in
	}
	var waiting []string
	for _, in := range s.collector.instances {
		switch k, ok := dumped[in.Name]; {
		case !ok:
			waiting = append(waiting, in.Name+" not set up")
		case k.Data.State == keepalived.StateInit:
			waiting = append(waiting, in.Name+" in INIT")
		case k.Data.State == keepalived.StateFault && s.check != nil && !s.check.Failing():
			// Every instance starts in FAULT until the built-in check
			// first passes; a FAULT counts only while the check fails.
			waiting = append(waiting, in.Name+" in FAULT while the check does not fail")
		case k.Data.State == keepalived.StateBackup && k.Data.MasterPriority == 0 && k.Stats["advert_rcvd"] == 0:
			// Nothing it could take over from yet: in a unicast domain that
			// is only forming (a migration from multicast), the next node
			// must not stop before this one is master or hears one.
			waiting = append(waiting, in.Name+" in BACKUP and has heard no master yet")
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("keepalived does not run every instance yet: %s", strings.Join(waiting, ", "))
	}
	return nil
}

func index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, `<html><head><title>ipfailover</title></head><body><h1>ipfailover</h1>
<ul><li><a href="/metrics">/metrics</a></li><li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul>
</body></html>
`)
}

// alive checks that keepalived runs: the supervisor says so, its PID exists, and the process
// is neither a zombie nor dead.
func alive(fs proc.FS, k Keepalived) error {
	pid := k.PID()
	if !k.Running() || pid <= 0 {
		return errNotRunning
	}
	st, err := fs.Stat(pid)
	if err != nil {
		return fmt.Errorf("keepalived pid %d is gone: %w", pid, err)
	}
	switch st.State {
	case 'Z':
		return fmt.Errorf("keepalived pid %d is a zombie", pid)
	case 'X', 'x':
		return fmt.Errorf("keepalived pid %d is dead", pid)
	}
	return nil
}

// safeCollector logs a panic of its collector instead of letting it end
// the process; the scrape then lacks that collector's series.
type safeCollector struct {
	prometheus.Collector
	log *slog.Logger
}

func (c safeCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("a metrics collector panicked; its series are missing from this scrape", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	c.Collector.Collect(ch)
}

// promLogger routes promhttp's errors to slog.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) { l.log.Warn("serving metrics", "err", fmt.Sprint(v...)) }
