package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

	"github.com/ipfailover/ipfailover/internal/proc"
	"github.com/ipfailover/ipfailover/test/lab"
)

// metricsPort is OPENSHIFT_HA_METRICS_ADDRESS's default port; the scenario
// leaves the variable unset, so the default is what is tested.
const metricsPort = 9650

// agreeTimeout bounds the wait for the metrics of every node to agree with
// the kernel: a handover, a restart and keepalived's startup fit in it many
// times over.
const agreeTimeout = 30 * time.Second

// exporterCounters are keepalived_exporter's per-instance counters, each
// keepalived_vrrp_<name> with labels name, intf, vrid and state.
var exporterCounters = []string{
	"advert_rcvd", "advert_sent", "become_master", "release_master",
	"packet_len_err", "advert_interval_err", "ip_ttl_err", "invalid_type_rcvd",
	"addr_list_err", "invalid_authtype", "authtype_mismatch", "auth_failure",
	"pri_zero_rcvd", "pri_zero_sent",
}

// stateNames maps keepalived_vrrp_state's values to the counters' state label.
var stateNames = map[float64]string{0: "INIT", 1: "BACKUP", 2: "MASTER", 3: "FAULT"}

// TestMetrics runs the real ipfailover and keepalived on three nodes and
// scrapes every node's :9650 from the client namespace, as Prometheus would:
// the exporter-compatible names and labels, state metrics that agree with the
// kernel's VIP holders before and after a SIGTERM handover, scrapes under
// concurrent load, and keepalived_up and /healthz while keepalived cannot
// answer.
func TestMetrics(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	hc := s.c.HTTPClient()
	live := slices.Clone(s.c.Nodes)

	t.Run("names and labels", func(t *testing.T) {
		for _, n := range live {
			m := s.waitScrape(t, hc, n, func(m *scrape) error { return m.wantUp(1) })
			if err := m.checkSchema(vips4); err != nil {
				t.Errorf("%s: %v", n.Name, err)
			}
		}
	})

	h := s.waitAgree(t, hc, live, vips4)
	t.Logf("before the handover, metrics agree with the kernel: %s", h)

	vip := vips4[0]
	old := h[vip]
	var newHolder, backup *lab.Node
	t.Run("SIGTERM handover", func(t *testing.T) {
		before := s.waitScrape(t, hc, old, nil)
		instance := before.vipInstance(vip)
		if instance == "" {
			t.Fatalf("%s reports no ipfailover_vip_held for %s", old.Name, vip)
		}
		p := f.Proc(old)
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(s.ctx); err != nil || code != 0 {
			t.Fatalf("ipfailover on %s after SIGTERM: exit %d, %v; want 0", old.Name, code, err)
		}
		live = others(s.c, old)
		h := s.waitAgree(t, hc, live, vips4)
		t.Logf("after SIGTERM to %s, metrics agree with the kernel: %s", old.Name, h)

		newHolder = h[vip]
		backup = live[0]
		if backup == newHolder {
			backup = live[1]
		}
		for _, c := range []struct {
			n           *lab.Node
			state, held float64
		}{{newHolder, 2, 1}, {backup, 1, 0}} {
			m := s.waitScrape(t, hc, c.n, nil)
			if got, ok := m.state(instance); !ok || got != c.state {
				t.Errorf("%s: keepalived_vrrp_state{name=%q} = %v (present %v), want %v", c.n.Name, instance, got, ok, c.state)
			}
			if got, ok := m.held(vip); !ok || got != c.held {
				t.Errorf("%s: ipfailover_vip_held{vip=%q} = %v (present %v), want %v", c.n.Name, vip, got, ok, c.held)
			}
		}
		// The stopped node's endpoint is gone: nothing listens on :9650.
		_, _, err := httpGet(s.ctx, hc, metricsURL(old, "/metrics"))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s after SIGTERM: GET /metrics: %v, want connection refused", old.Name, err)
		}
	})
	if newHolder == nil {
		t.FailNow()
	}

	t.Run("concurrent scrapes", func(t *testing.T) {
		s.concurrentScrapes(t, hc, newHolder, live, vips4)
	})

	t.Run("keepalived frozen", func(t *testing.T) {
		s.frozen(t, hc, f.Proc(backup))
	})

	t.Run("keepalived a zombie", func(t *testing.T) {
		p := f.Proc(backup)
		s.zombie(t, hc, p, f.Outputs[slices.Index(f.Procs, p)])
	})

	if t.Failed() {
		return
	}
	h = s.waitAgree(t, hc, live, vips4)
	t.Logf("at the end, metrics agree with the kernel: %s", h)
}

// concurrentScrapes runs 8 goroutines of 50 scrapes each against n: every
// response must be a 200 that parses, with keepalived_up 1 and the same
// states and held VIPs as before the load, and the holders must not move.
func (s *scenario) concurrentScrapes(t *testing.T, hc *http.Client, n *lab.Node, live []*lab.Node, vips []netip.Addr) {
	const workers, scrapes = 8, 50
	holders := s.waitAgree(t, hc, live, vips)
	ref := s.waitScrape(t, hc, n, nil)
	wantStates, wantHeld := ref.states(), ref.helds()
	dumpsBefore := ref.dumps()

	var (
		mu    sync.Mutex
		fails []string
		nfail int
		wg    sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		nfail++
		if len(fails) < 5 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range scrapes {
				if s.ctx.Err() != nil {
					fail("worker %d scrape %d: %v", w, i, s.ctx.Err())
					return
				}
				m, err := scrapeNode(s.ctx, hc, n)
				if err != nil {
					fail("worker %d scrape %d: %v", w, i, err)
					continue
				}
				if err := m.wantUp(1); err != nil {
					fail("worker %d scrape %d: %v", w, i, err)
				}
				if got := m.states(); !maps.Equal(got, wantStates) {
					fail("worker %d scrape %d: keepalived_vrrp_state %v, want %v", w, i, got, wantStates)
				}
				if got := m.helds(); !maps.Equal(got, wantHeld) {
					fail("worker %d scrape %d: ipfailover_vip_held %v, want %v", w, i, got, wantHeld)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for _, f := range fails {
		t.Error(f)
	}
	if nfail > len(fails) {
		t.Errorf("... and %d more failed scrapes", nfail-len(fails))
	}
	after := s.waitScrape(t, hc, n, nil)
	t.Logf("%d scrapes of %s in %v (%.0f/s), %d failed; keepalived dumped %v times for them",
		workers*scrapes, n.Name, took.Round(time.Millisecond), float64(workers*scrapes)/took.Seconds(), nfail, after.dumps()-dumpsBefore)
	now, err := s.c.WaitOneHolder(s.ctx, vips, nil)
	if err != nil {
		t.Fatal(err)
	}
	if now.String() != holders.String() {
		t.Errorf("holders moved during the load: %s, then %s", holders, now)
	}
}

// frozen stops keepalived's parent with SIGSTOP. The VRRP child keeps
// running (the VIPs stay where they are), but the parent is the one that
// gets the JSON dump signal and passes it on, so no dump can come: this
// observes, without any race, that a keepalived that cannot answer is
// reported as keepalived_up 0 with no per-instance series, while the scrape
// itself still succeeds and ipfailover_vip_held still reports the kernel.
// /healthz is logged, not asserted: docs/monitoring.md defines it as "the PID exists
// and is not a zombie", which a stopped process satisfies.
func (s *scenario) frozen(t *testing.T, hc *http.Client, p *lab.Process) {
	n := p.Node()
	kpid := keepalivedParent(t, p)
	before := s.waitScrape(t, hc, n, func(m *scrape) error { return m.wantUp(1) })
	errsBefore := before.value("ipfailover_scrape_errors_total", map[string]string{"source": "keepalived_dump"})

	if err := syscall.Kill(kpid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(kpid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT to keepalived %d: %v", kpid, err)
			}
		}
	}
	defer resume()

	// The first scrapes may be served from a dump younger than 250 ms.
	m := s.waitScrape(t, hc, n, func(m *scrape) error { return m.wantUp(0) })
	if m.has("keepalived_vrrp_state") || m.has("keepalived_vrrp_advert_sent") {
		t.Errorf("%s: per-instance keepalived series while keepalived is frozen:\n%s", n.Name, m.body)
	}
	if len(m.helds()) != len(vips4) {
		t.Errorf("%s: ipfailover_vip_held %v while keepalived is frozen, want one series per VIP", n.Name, m.helds())
	}
	if errs := m.value("ipfailover_scrape_errors_total", map[string]string{"source": "keepalived_dump"}); errs <= errsBefore {
		t.Errorf("%s: ipfailover_scrape_errors_total{source=keepalived_dump} = %v, was %v: a failed dump must count", n.Name, errs, errsBefore)
	}
	code, body, err := httpGet(s.ctx, hc, metricsURL(n, "/healthz"))
	t.Logf("%s: keepalived %d stopped: keepalived_up 0; /healthz %d %q %v", n.Name, kpid, code, strings.TrimSpace(body), err)

	resume()
	s.waitScrape(t, hc, n, func(m *scrape) error { return m.wantUp(1) })
}

// zombie makes keepalived's parent a zombie that ipfailover cannot reap, for
// as long as the test wants, and checks /healthz answers 503 and /metrics
// keepalived_up 0 the whole time (and /readyz 503); then lets ipfailover reap it and checks
// that keepalived comes back and both recover.
//
// Killing keepalived alone would leave a window of only the reaper's
// latency plus the 100 ms restart backoff in which to see the 503: a race.
// Instead the test attaches to keepalived with ptrace (PTRACE_SEIZE, which
// does not stop it) before the SIGKILL. The kernel shows a dead tracee's
// zombie only to its tracer until the tracer waits for it; only then does
// the real parent get SIGCHLD and reap it. So the zombie state is held
// exactly between the kill and our wait4, and ipfailover's view of it is
// what a real zombie looks like from /proc.
func (s *scenario) zombie(t *testing.T, hc *http.Client, p *lab.Process, out *lab.Output) {
	n := p.Node()
	kpid := keepalivedParent(t, p)
	before := s.waitScrape(t, hc, n, func(m *scrape) error { return m.wantUp(1) })
	restarts := before.value("ipfailover_keepalived_restarts_total", nil)

	// A tracee belongs to the tracer thread: this goroutine keeps its thread
	// until the tracee is reaped (release, deferred below, runs first). It
	// gives the thread back rather than letting it exit with the goroutine:
	// an exiting thread sends Pdeathsig to children forked on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(kpid); err != nil {
		t.Skipf("cannot ptrace keepalived to hold its zombie: %v", err)
	}
	if err := syscall.Kill(kpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reaped := false
	release := func() {
		if reaped {
			return
		}
		reaped = true
		var ws unix.WaitStatus
		got, err := unix.Wait4(kpid, &ws, unix.WALL, nil)
		if err != nil || got != kpid || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("wait4(%d) as tracer = %d, %v, status %v", kpid, got, err, ws)
		}
	}
	defer release()
	s.poll(t, fmt.Sprintf("zombie of keepalived %d", kpid), func(context.Context) error {
		st, err := proc.FS{}.Stat(kpid)
		if err == nil && st.State != 'Z' {
			err = fmt.Errorf("state %c", st.State)
		}
		return err
	})

	// Several observations over a second, so a 503 that flips back (a
	// zombie reaped behind the tracer's back) would show.
	for i := range 5 {
		code, body, err := httpGet(s.ctx, hc, metricsURL(n, "/healthz"))
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "zombie") {
			t.Errorf("%s /healthz with keepalived %d a zombie (look %d): %d %q %v, want 503 naming the zombie", n.Name, kpid, i, code, body, err)
		}
		m, err := scrapeNode(s.ctx, hc, n)
		if err != nil {
			t.Errorf("%s /metrics with keepalived a zombie: %v", n.Name, err)
		} else {
			if err := m.wantUp(0); err != nil {
				t.Errorf("%s with keepalived a zombie: %v", n.Name, err)
			}
			if m.has("keepalived_vrrp_state") {
				t.Errorf("%s: keepalived_vrrp_state served with keepalived a zombie", n.Name)
			}
		}
		if st, err := (proc.FS{}).Stat(kpid); err != nil || st.State != 'Z' {
			t.Fatalf("keepalived %d state %q %v: the zombie was not held", kpid, st.State, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, body, err := httpGet(s.ctx, hc, metricsURL(n, "/readyz"))
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "zombie") {
		t.Errorf("%s /readyz with keepalived %d a zombie: %d %q %v, want 503 naming the zombie", n.Name, kpid, code, body, err)
	}

	// Prometheus does not wait for keepalived to be ready: keep scraping,
	// from two goroutines, while ipfailover reaps the zombie and starts a
	// new keepalived. Those scrapes must not hurt the new keepalived: after
	// our one kill, exactly one death and one restart.
	died := out.Count("keepalived died")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var during atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := scrapeNode(s.ctx, hc, n); err == nil {
					during.Add(1)
				}
			}
		})
	}
	release()
	s.poll(t, "/healthz 200 after keepalived's restart", func(ctx context.Context) error {
		code, body, err := httpGet(ctx, hc, metricsURL(n, "/healthz"))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})
	m := s.waitScrape(t, hc, n, func(m *scrape) error { return m.wantUp(1) })
	close(stop)
	wg.Wait()
	t.Logf("%s: %d scrapes while keepalived restarted", n.Name, during.Load())
	if deaths := out.Count("keepalived died") - died; deaths != 1 {
		t.Errorf("%s: keepalived died %d times after one SIGKILL, want 1; ipfailover's log:\n%s", n.Name, deaths, supervisorLog(out))
	}
	if got := m.value("ipfailover_keepalived_restarts_total", nil); got != restarts+1 {
		t.Errorf("%s: ipfailover_keepalived_restarts_total = %v, want %v", n.Name, got, restarts+1)
	}
	if now := keepalivedParent(t, p); now == kpid {
		t.Errorf("keepalived pid %d after the restart, the killed one", now)
	}
	if p.Exited() {
		t.Errorf("ipfailover on %s exited", n.Name)
	}
}

// supervisorLog returns ipfailover's own log lines from out, without
// keepalived's.
func supervisorLog(out *lab.Output) string {
	var lines []string
	for line := range strings.SplitSeq(out.String(), "\n") {
		if strings.HasPrefix(line, "time=") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// keepalivedParent returns the host pid of the keepalived that p started.
func keepalivedParent(t *testing.T, p *lab.Process) int {
	t.Helper()
	ks, err := p.Find("keepalived")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.PPid == p.Pid && k.State != "Z" {
			return k.Pid
		}
	}
	t.Fatalf("no live keepalived child of ipfailover %d on %s: %+v", p.Pid, p.Node().Name, ks)
	return 0
}

// waitAgree polls until the metrics of every node in nodes agree with the
// kernel's holders, which must not change during the round, and returns
// them. Fatal at agreeTimeout with the last disagreement.
func (s *scenario) waitAgree(t *testing.T, hc *http.Client, nodes []*lab.Node, vips []netip.Addr) lab.HolderMap {
	t.Helper()
	var h lab.HolderMap
	s.poll(t, "metrics that agree with the kernel", func(ctx context.Context) error {
		var err error
		h, err = s.agree(ctx, hc, nodes, vips)
		return err
	})
	return h
}

// poll calls cond until it returns nil, at most agreeTimeout; then the test
// fails with cond's last error.
func (s *scenario) poll(t *testing.T, what string, cond func(context.Context) error) {
	t.Helper()
	s.pollEvery(t, what, lab.PollInterval, cond)
}

// pollEvery is poll with its own interval.
func (s *scenario) pollEvery(t *testing.T, what string, every time.Duration, cond func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, agreeTimeout)
	defer cancel()
	for {
		err := cond(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %s within %v; last: %v", what, agreeTimeout, err)
		case <-time.After(every):
		}
	}
}

// agree scrapes every node between two looks at the kernel. For each VIP,
// the one node that holds it must report ipfailover_vip_held 1 and MASTER
// (2) for its instance; every other node 0 and BACKUP (1). The holder must be
// one of nodes.
func (s *scenario) agree(ctx context.Context, hc *http.Client, nodes []*lab.Node, vips []netip.Addr) (lab.HolderMap, error) {
	h1, err := kernelHolders(s.c, vips)
	if err != nil {
		return nil, err
	}
	ms := make([]*scrape, len(nodes))
	for i, n := range nodes {
		if ms[i], err = scrapeNode(ctx, hc, n); err != nil {
			return nil, err
		}
	}
	h2, err := kernelHolders(s.c, vips)
	if err != nil {
		return nil, err
	}
	if h1.String() != h2.String() {
		return nil, fmt.Errorf("holders moved while scraping: %s, then %s", h1, h2)
	}
	for _, v := range vips {
		if !slices.Contains(nodes, h2[v]) {
			return nil, fmt.Errorf("%s is held by %s, not one of the nodes running ipfailover", v, h2[v].Name)
		}
	}
	for i, n := range nodes {
		m := ms[i]
		if err := m.wantUp(1); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		for _, v := range vips {
			instance := m.vipInstance(v)
			if instance == "" {
				return nil, fmt.Errorf("%s: no ipfailover_vip_held for %s", n.Name, v)
			}
			wantState, wantHeld := 1.0, 0.0
			if h2[v] == n {
				wantState, wantHeld = 2, 1
			}
			if got, _ := m.held(v); got != wantHeld {
				return nil, fmt.Errorf("%s: ipfailover_vip_held{vip=%q} %v, want %v (holders %s)", n.Name, v, got, wantHeld, h2)
			}
			if got, ok := m.state(instance); !ok || got != wantState {
				return nil, fmt.Errorf("%s: keepalived_vrrp_state{name=%q} %v (present %v), want %v (holders %s)", n.Name, instance, got, ok, wantState, h2)
			}
		}
	}
	return h2, nil
}

// kernelHolders returns the one holder of each VIP, an error when a VIP has none
// or several.
func kernelHolders(c *lab.Cluster, vips []netip.Addr) (lab.HolderMap, error) {
	m := lab.HolderMap{}
	for _, v := range vips {
		n, err := c.Holder(v)
		if err != nil {
			return nil, err
		}
		if n == nil {
			return nil, fmt.Errorf("nobody holds %s", v)
		}
		m[v] = n
	}
	return m, nil
}

// scrape is one parsed /metrics response.
type scrape struct {
	body string
	fams map[string]*dto.MetricFamily
}

func metricsURL(n *lab.Node, path string) string {
	return fmt.Sprintf("http://%s:%d%s", n.Addr4, metricsPort, path)
}

// httpGet fetches url and returns the status and body.
func httpGet(ctx context.Context, hc *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrapeNode fetches n's /metrics from the client namespace and parses it
// with the Prometheus text parser.
func scrapeNode(ctx context.Context, hc *http.Client, n *lab.Node) (*scrape, error) {
	code, body, err := httpGet(ctx, hc, metricsURL(n, "/metrics"))
	if err != nil {
		return nil, fmt.Errorf("%s: GET /metrics: %w", n.Name, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: GET /metrics: status %d: %s", n.Name, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: parsing /metrics: %w\n%s", n.Name, err, body)
	}
	return &scrape{body: body, fams: fams}, nil
}

// waitScrape scrapes n until cond (nil: any parsed scrape) accepts it.
func (s *scenario) waitScrape(t *testing.T, hc *http.Client, n *lab.Node, cond func(*scrape) error) *scrape {
	t.Helper()
	var m *scrape
	s.poll(t, n.Name+" metrics", func(ctx context.Context) error {
		var err error
		if m, err = scrapeNode(ctx, hc, n); err != nil || cond == nil {
			return err
		}
		return cond(m)
	})
	return m
}

func (m *scrape) has(name string) bool {
	f, ok := m.fams[name]
	return ok && len(f.GetMetric()) > 0
}

// value returns the value of the series of name whose labels include want
// (nil: the first series), 0 when there is none.
func (m *scrape) value(name string, want map[string]string) float64 {
	for _, s := range m.fams[name].GetMetric() {
		l := labelMap(s)
		if want != nil && !labelsMatch(l, want) {
			continue
		}
		return sampleValue(s)
	}
	return 0
}

func labelsMatch(l, want map[string]string) bool {
	for k, v := range want {
		if l[k] != v {
			return false
		}
	}
	return true
}

func sampleValue(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Untyped != nil:
		return s.GetUntyped().GetValue()
	}
	return 0
}

func labelMap(s *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range s.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func (m *scrape) wantUp(want float64) error {
	f := m.fams["keepalived_up"]
	if len(f.GetMetric()) != 1 {
		return fmt.Errorf("keepalived_up: %d series, want 1", len(f.GetMetric()))
	}
	if got := sampleValue(f.GetMetric()[0]); got != want {
		return fmt.Errorf("keepalived_up %v, want %v", got, want)
	}
	return nil
}

// states returns keepalived_vrrp_state by instance name.
func (m *scrape) states() map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.fams["keepalived_vrrp_state"].GetMetric() {
		out[labelMap(s)["name"]] = sampleValue(s)
	}
	return out
}

func (m *scrape) state(instance string) (float64, bool) {
	v, ok := m.states()[instance]
	return v, ok
}

// helds returns ipfailover_vip_held by VIP.
func (m *scrape) helds() map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.fams["ipfailover_vip_held"].GetMetric() {
		out[labelMap(s)["vip"]] = sampleValue(s)
	}
	return out
}

func (m *scrape) held(vip netip.Addr) (float64, bool) {
	v, ok := m.helds()[vip.String()]
	return v, ok
}

// vipInstance returns the instance ipfailover_vip_held names for vip.
func (m *scrape) vipInstance(vip netip.Addr) string {
	for _, s := range m.fams["ipfailover_vip_held"].GetMetric() {
		if l := labelMap(s); l["vip"] == vip.String() {
			return l["instance"]
		}
	}
	return ""
}

// dumps returns how many JSON dumps the node has asked keepalived for.
func (m *scrape) dumps() uint64 {
	return m.fams["ipfailover_keepalived_dump_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount()
}

// checkSchema checks the exporter-compatible families of a scrape with
// keepalived up, on a node configured with one instance per VIP: types,
// exact label names, one series per instance, the interface, the state
// label agreeing with keepalived_vrrp_state, and ipfailover_vip_held naming
// the same instances.
func (m *scrape) checkSchema(vips []netip.Addr) error {
	var errs []error
	family := func(name string, typ dto.MetricType, labelNames ...string) []*dto.Metric {
		f, ok := m.fams[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s missing", name))
			return nil
		}
		if f.GetType() != typ {
			errs = append(errs, fmt.Errorf("%s is a %v, want %v", name, f.GetType(), typ))
		}
		slices.Sort(labelNames)
		for _, s := range f.GetMetric() {
			got := slices.Sorted(maps.Keys(labelMap(s)))
			if !slices.Equal(got, labelNames) {
				errs = append(errs, fmt.Errorf("%s has labels %v, want %v", name, got, labelNames))
				break
			}
		}
		return f.GetMetric()
	}

	family("keepalived_up", dto.MetricType_GAUGE)
	if m.fams["keepalived_up"].GetHelp() != "Status" {
		errs = append(errs, fmt.Errorf("keepalived_up help %q, want the exporter's %q", m.fams["keepalived_up"].GetHelp(), "Status"))
	}

	// Instances by name, from keepalived_vrrp_state.
	type inst struct {
		vrid  string
		state float64
	}
	instances := map[string]inst{}
	for _, s := range family("keepalived_vrrp_state", dto.MetricType_GAUGE, "name", "intf", "vrid") {
		l := labelMap(s)
		if l["intf"] != lab.Link {
			errs = append(errs, fmt.Errorf("keepalived_vrrp_state{name=%q} intf %q, want %q", l["name"], l["intf"], lab.Link))
		}
		if _, err := strconv.Atoi(l["vrid"]); err != nil {
			errs = append(errs, fmt.Errorf("keepalived_vrrp_state{name=%q} vrid %q is not a number", l["name"], l["vrid"]))
		}
		v := sampleValue(s)
		if v != 1 && v != 2 {
			errs = append(errs, fmt.Errorf("keepalived_vrrp_state{name=%q} = %v, want BACKUP (1) or MASTER (2) once converged", l["name"], v))
		}
		instances[l["name"]] = inst{l["vrid"], v}
	}
	if len(instances) != len(vips) {
		errs = append(errs, fmt.Errorf("keepalived_vrrp_state for %d instances, want %d (one per VIP)", len(instances), len(vips)))
	}
	vrids := map[string]bool{}
	for _, in := range instances {
		vrids[in.vrid] = true
	}
	if len(vrids) != len(instances) {
		errs = append(errs, fmt.Errorf("instances share router ids: %v", instances))
	}

	for _, c := range exporterCounters {
		name := "keepalived_vrrp_" + c
		series := family(name, dto.MetricType_COUNTER, "name", "intf", "vrid", "state")
		if len(series) != len(instances) {
			errs = append(errs, fmt.Errorf("%s: %d series, want one per instance (%d)", name, len(series), len(instances)))
		}
		for _, s := range series {
			l := labelMap(s)
			in, ok := instances[l["name"]]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s{name=%q}: no such instance in keepalived_vrrp_state", name, l["name"]))
			case l["vrid"] != in.vrid || l["intf"] != lab.Link || l["state"] != stateNames[in.state]:
				errs = append(errs, fmt.Errorf("%s labels %v, want vrid %s, intf %s, state %s", name, l, in.vrid, lab.Link, stateNames[in.state]))
			}
			if v := sampleValue(s); v < 0 {
				errs = append(errs, fmt.Errorf("%s%v = %v", name, l, v))
			}
		}
	}
	// Every instance has sent or received adverts by now.
	for name := range instances {
		sent := m.value("keepalived_vrrp_advert_sent", map[string]string{"name": name})
		rcvd := m.value("keepalived_vrrp_advert_rcvd", map[string]string{"name": name})
		if sent+rcvd == 0 {
			errs = append(errs, fmt.Errorf("instance %s: no advert sent or received", name))
		}
	}

	held := family("ipfailover_vip_held", dto.MetricType_GAUGE, "vip", "instance", "intf")
	var heldVIPs []string
	for _, s := range held {
		l := labelMap(s)
		heldVIPs = append(heldVIPs, l["vip"])
		if _, ok := instances[l["instance"]]; !ok {
			errs = append(errs, fmt.Errorf("ipfailover_vip_held{vip=%q} names instance %q, which keepalived does not report", l["vip"], l["instance"]))
		}
		if v := sampleValue(s); v != 0 && v != 1 {
			errs = append(errs, fmt.Errorf("ipfailover_vip_held{vip=%q} = %v", l["vip"], v))
		}
	}
	var wantVIPs []string
	for _, v := range vips {
		wantVIPs = append(wantVIPs, v.String())
	}
	slices.Sort(heldVIPs)
	slices.Sort(wantVIPs)
	if !slices.Equal(heldVIPs, wantVIPs) {
		errs = append(errs, fmt.Errorf("ipfailover_vip_held for %v, want %v", heldVIPs, wantVIPs))
	}
	return errors.Join(errs...)
}
