package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/proc"
	"github.com/ipfailover/ipfailover/test/syncbuf"
	"github.com/ipfailover/ipfailover/test/wait"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// jsonSignal is glibc's SIGRTMIN+2, keepalived's JSON dump signal, for the fake keepalived.
const jsonSignal = syscall.Signal(36)

// process is a Keepalived whose PID and state the test sets.
type process struct {
	pid      atomic.Int64
	restarts atomic.Int64
	running  atomic.Bool
}

func newProcess(pid int) *process {
	p := &process{}
	p.pid.Store(int64(pid))
	p.running.Store(pid > 0)
	return p
}

func (p *process) PID() int      { return int(p.pid.Load()) }
func (p *process) Restarts() int { return int(p.restarts.Load()) }
func (p *process) Running() bool { return p.running.Load() }

// addrs is an in-memory VIPLister.
type addrs map[string][]netip.Prefix

func (a addrs) List(iface string) ([]netip.Prefix, error) {
	p, ok := a[iface]
	if !ok {
		return nil, errors.New("no such interface " + iface)
	}
	return p, nil
}

// fake is a running fake keepalived (fakeKeepalived in this test binary).
type fake struct {
	pid     int
	dump    string
	fixture string
	count   string
}

// signals is how many dump signals the fake got.
func (f *fake) signals(t testing.TB) int {
	b, err := os.ReadFile(f.count)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "signal\n")
}

// startFake starts a fake keepalived serving a copy of fixture ("ignore": nothing).
func startFake(t testing.TB, fixture string) *fake {
	t.Helper()
	dir := t.TempDir()
	f := &fake{dump: filepath.Join(dir, "keepalived.json"), count: filepath.Join(dir, "signals"), fixture: "ignore"}
	if fixture != "ignore" {
		f.fixture = filepath.Join(dir, "fixture.json")
		copyFile(t, dumpFixture(fixture), f.fixture)
	}
	cmd := exec.Command(os.Args[0], strconv.Itoa(int(jsonSignal)), f.fixture, f.dump, f.count)
	cmd.Env = append(os.Environ(), fakeKeepalivedEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	f.pid = cmd.Process.Pid
	wait.For(t, "the fake keepalived's signal handler", func() bool {
		_, err := os.Stat(f.count + ".ready")
		return err == nil
	})
	return f
}

// dumpFixture is a keepalived JSON dump captured for internal/keepalived's tests.
func dumpFixture(name string) string {
	return filepath.Join("..", "keepalived", "testdata", "dumps", name)
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testPlan is a multicast plan named name on iface, with preempt_delay 300 and the given
// instances.
func testPlan(name, iface string, ins ...config.Instance) *plan.Plan {
	cfg := &config.Config{Name: name, Preemption: config.Preemption{Delay: 300 * time.Second}}
	for _, in := range ins {
		cfg.VIPs = append(cfg.VIPs, in.VIPs...)
	}
	return &plan.Plan{Config: cfg, Node: config.Node{Interface: iface}, Instances: ins}
}

// instance is the vrrp_instance name on iface with router id vrid, priority and VIPs.
func instance(name, iface string, vrid, priority int, vips ...string) config.Instance {
	in := config.Instance{Name: name, Interface: iface, Priority: priority}
	in.RouterID = config.RouterID(vrid)
	for _, v := range vips {
		in.VIPs = append(in.VIPs, netip.MustParseAddr(v))
	}
	return in
}

func testOptions(k Keepalived, dumpPath string) Options {
	return Options{
		Keepalived: k,
		DumpPath:   dumpPath,
		Signal:     jsonSignal,
		Version:    "v0.0.0-test",
		Plan: testPlan("OpenShift-IPFailover", "vb",
			instance("T_VIP_1", "vb", 51, 50, "192.0.2.100"),
			instance("T_VIP_2", "vb", 52, 40, "192.0.2.101", "2001:db8::1")),
		VIPs: addrs{"vb": {
			netip.MustParsePrefix("192.0.2.2/24"),
			netip.MustParsePrefix("192.0.2.101/32"),
		}},
	}
}

func newServer(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testWriter sends the server's log lines to the test's log, shown when the test fails.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// gauge returns the value of the series of family name whose labels include want.
func gauge(t testing.TB, s *Server, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// TestCollectAndCompare checks the exposition of a real keepalived 2.2.7 dump, taken through
// the signal and file path of a fake keepalived, against keepalived_exporter's names.
func TestCollectAndCompare(t *testing.T) {
	f := startFake(t, "two-backup-errors.json")
	p := newProcess(f.pid)
	p.restarts.Store(2)
	o := testOptions(p, f.dump)
	o.DumpMaxAge = time.Hour
	s := newServer(t, o)

	want := `
# HELP keepalived_up Status
# TYPE keepalived_up gauge
keepalived_up 1
# HELP keepalived_vrrp_advert_interval_err Advertisement interval errors
# TYPE keepalived_vrrp_advert_interval_err counter
keepalived_vrrp_advert_interval_err{intf="vb",name="T_VIP_1",state="BACKUP",vrid="51"} 0
keepalived_vrrp_advert_interval_err{intf="vb",name="T_VIP_2",state="BACKUP",vrid="52"} 0
# HELP keepalived_vrrp_advert_rcvd Advertisements received
# TYPE keepalived_vrrp_advert_rcvd counter
keepalived_vrrp_advert_rcvd{intf="vb",name="T_VIP_1",state="BACKUP",vrid="51"} 11
keepalived_vrrp_advert_rcvd{intf="vb",name="T_VIP_2",state="BACKUP",vrid="52"} 11
# HELP keepalived_vrrp_ip_ttl_err TTL errors
# TYPE keepalived_vrrp_ip_ttl_err counter
keepalived_vrrp_ip_ttl_err{intf="vb",name="T_VIP_1",state="BACKUP",vrid="51"} 3
keepalived_vrrp_ip_ttl_err{intf="vb",name="T_VIP_2",state="BACKUP",vrid="52"} 0
# HELP keepalived_vrrp_state VRRP instance state from keepalived: 0 INIT, 1 BACKUP, 2 MASTER, 3 FAULT. One series per instance, whatever the state.
# TYPE keepalived_vrrp_state gauge
keepalived_vrrp_state{intf="vb",name="T_VIP_1",vrid="51"} 1
keepalived_vrrp_state{intf="vb",name="T_VIP_2",vrid="52"} 1
# HELP ipfailover_vip_held 1 when the kernel has this configured VIP on the interface now, else 0.
# TYPE ipfailover_vip_held gauge
ipfailover_vip_held{instance="T_VIP_1",intf="vb",vip="192.0.2.100"} 0
ipfailover_vip_held{instance="T_VIP_2",intf="vb",vip="192.0.2.101"} 1
ipfailover_vip_held{instance="T_VIP_2",intf="vb",vip="2001:db8::1"} 0
# HELP ipfailover_keepalived_restarts_total Times keepalived was started again after it exited.
# TYPE ipfailover_keepalived_restarts_total counter
ipfailover_keepalived_restarts_total 2
# HELP ipfailover_vrrp_last_transition_timestamp_seconds Time of the last VRRP state change seen for the instance, in seconds since the epoch.
# TYPE ipfailover_vrrp_last_transition_timestamp_seconds gauge
ipfailover_vrrp_last_transition_timestamp_seconds{intf="vb",name="T_VIP_1",vrid="51"} 1.795277130216918e+09
ipfailover_vrrp_last_transition_timestamp_seconds{intf="vb",name="T_VIP_2",vrid="52"} 1.795277130217718e+09
# HELP ipfailover_config_info The effective configuration; always 1.
# TYPE ipfailover_config_info gauge
ipfailover_config_info{config_name="OpenShift-IPFailover",instances="2",interface="vb",preemption="preempt_delay 300",vrid_range="51-52",vrrp_mode="multicast"} 1
# HELP ipfailover_scrape_errors_total Scrapes that could not read a source: keepalived_dump or vip_list.
# TYPE ipfailover_scrape_errors_total counter
ipfailover_scrape_errors_total{source="keepalived_dump"} 0
ipfailover_scrape_errors_total{source="vip_list"} 0
`
	names := []string{"keepalived_up", "keepalived_vrrp_advert_interval_err", "keepalived_vrrp_advert_rcvd",
		"keepalived_vrrp_ip_ttl_err", "keepalived_vrrp_state", "ipfailover_vip_held",
		"ipfailover_keepalived_restarts_total", "ipfailover_vrrp_last_transition_timestamp_seconds",
		"ipfailover_config_info", "ipfailover_scrape_errors_total"}
	if err := testutil.CollectAndCompare(s.collector, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.collector, "keepalived_vrrp_pri_zero_sent"); n != 2 {
		t.Errorf("keepalived_vrrp_pri_zero_sent has %d series, want 2", n)
	}
	// The second collection reused the first dump.
	if n := f.signals(t); n != 1 {
		t.Errorf("the fake keepalived got %d dump signals, want 1", n)
	}
}

// TestLint allows only the missing _total suffix, on the names kept for compatibility.
func TestLint(t *testing.T) {
	f := startFake(t, "two-master.json")
	s := newServer(t, testOptions(newProcess(f.pid), f.dump))
	problems, err := testutil.CollectAndLint(s.collector)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "keepalived_vrrp_") && strings.Contains(p.Text, `"_total" suffix`) {
			continue
		}
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// The registry as served also gathers cleanly (Go and process collectors included).
	if _, err := testutil.GatherAndCount(s.registry); err != nil {
		t.Error(err)
	}
}

func TestDumpFailure(t *testing.T) {
	tests := []struct {
		name       string
		fixture    string
		running    bool
		wantErrors float64
	}{
		{name: "keepalived ignores the signal", fixture: "ignore", running: true, wantErrors: 1},
		{name: "keepalived not running", fixture: "ignore", running: false, wantErrors: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, tt.fixture)
			p := newProcess(f.pid)
			p.running.Store(tt.running)
			o := testOptions(p, f.dump)
			o.DumpTimeout = 300 * time.Millisecond
			s := newServer(t, o)

			rec := httptest.NewRecorder()
			s.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", http.NoBody))
			if rec.Code != http.StatusOK {
				t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
			}
			body := rec.Body.String()
			if n := strings.Count(body, "\nkeepalived_up "); n != 1 {
				t.Errorf("keepalived_up appears %d times, want once:\n%s", n, body)
			}
			if !strings.Contains(body, "\nkeepalived_up 0\n") {
				t.Errorf("want keepalived_up 0 in:\n%s", body)
			}
			if strings.Contains(body, "\nkeepalived_vrrp_") {
				t.Errorf("keepalived_vrrp_* series without a dump:\n%s", body)
			}
			if !strings.Contains(body, `ipfailover_vip_held{instance="T_VIP_2",intf="vb",vip="192.0.2.101"} 1`) {
				t.Errorf("the kernel's VIPs are missing while keepalived is down:\n%s", body)
			}
			if got := testutil.ToFloat64(s.collector.scrapeErrors.WithLabelValues(sourceDump)); got != tt.wantErrors {
				t.Errorf("scrape errors = %v, want %v", got, tt.wantErrors)
			}
		})
	}
}

// TestHalfWrittenDump: the fake writes half the dump, pauses, then writes it all; the scrape
// must wait for the complete file rather than fail or report a partial list.
func TestHalfWrittenDump(t *testing.T) {
	f := startFake(t, "two-master.json")
	o := testOptions(newProcess(f.pid), f.dump)
	o.DumpMaxAge = -1
	s := newServer(t, o)
	for range 5 {
		if n := testutil.CollectAndCount(s.collector, "keepalived_vrrp_advert_sent"); n != 2 {
			t.Fatalf("keepalived_vrrp_advert_sent has %d series, want 2", n)
		}
	}
	if got := testutil.ToFloat64(s.collector.scrapeErrors.WithLabelValues(sourceDump)); got != 0 {
		t.Errorf("scrape errors = %v, want 0", got)
	}
}

// TestFreshDump: without reuse, every scrape signals keepalived and sees the newest dump.
func TestFreshDump(t *testing.T) {
	f := startFake(t, "two-master.json")
	o := testOptions(newProcess(f.pid), f.dump)
	o.DumpMaxAge = -1
	s := newServer(t, o)
	if got := gauge(t, s, "keepalived_vrrp_state", map[string]string{"name": "T_VIP_1"}); got != keepalived.StateMaster {
		t.Fatalf("state = %v, want MASTER", got)
	}
	copyFile(t, dumpFixture("two-backup-errors.json"), f.fixture)
	if got := gauge(t, s, "keepalived_vrrp_state", map[string]string{"name": "T_VIP_1"}); got != keepalived.StateBackup {
		t.Fatalf("state after the fixture changed = %v, want BACKUP", got)
	}
	if n := f.signals(t); n != 2 {
		t.Errorf("signals = %d, want 2", n)
	}
}

// TestConcurrentScrapesShareOneDump: many parallel scrapes cause one signal.
func TestConcurrentScrapesShareOneDump(t *testing.T) {
	f := startFake(t, "two-master.json")
	o := testOptions(newProcess(f.pid), f.dump)
	o.DumpMaxAge = time.Hour
	s := newServer(t, o)
	scrapeConcurrently(t, s, maxScrapes)
	if n := f.signals(t); n != 1 {
		t.Errorf("%d parallel scrapes sent %d dump signals, want 1", maxScrapes, n)
	}
}

// scrapeConcurrently runs n parallel GET /metrics and checks each saw keepalived up.
func scrapeConcurrently(t testing.TB, s *Server, n int) {
	t.Helper()
	var wg sync.WaitGroup
	bodies := make([]string, n)
	for i := range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			s.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", http.NoBody))
			bodies[i] = rec.Body.String()
		})
	}
	wg.Wait()
	for i, b := range bodies {
		if !strings.Contains(b, "\nkeepalived_up 1\n") || !strings.Contains(b, `keepalived_vrrp_state{`) {
			t.Errorf("scrape %d lacks keepalived_up 1 or the state:\n%s", i, b)
		}
	}
}

func get(t testing.TB, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, http.NoBody))
	return rec.Code, rec.Body.String()
}

func TestHealthz(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := newProcess(cmd.Process.Pid)
	s := newServer(t, Options{Plan: testPlan("t", "vb"), Signal: jsonSignal, Keepalived: p})

	if code, body := get(t, s.handler, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with keepalived alive: %d %q", code, body)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie is not alive.
	wait.For(t, "/healthz to report the zombie", func() bool {
		code, body := get(t, s.handler, "/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "zombie")
	})
	cmd.Wait()
	code, body := get(t, s.handler, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "gone") || strings.Count(body, "\n") != 1 {
		t.Errorf("/healthz after the PID died: %d %q, want 503 and one line saying it is gone", code, body)
	}
	p.running.Store(false)
	if code, body := get(t, s.handler, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
		t.Errorf("/healthz with keepalived stopped: %d %q", code, body)
	}
}

// TestHealthzReadsProc: the probes judge keepalived by its state in the proc file system they
// are given, here internal/proc's fixture tree (42 sleeps, 77 is a zombie, 1234 does not exist).
func TestHealthzReadsProc(t *testing.T) {
	fixture := proc.FS{Root: filepath.Join("..", "proc", "testdata", "proc")}
	for _, tt := range []struct {
		pid  int
		code int
		body string
	}{
		{42, http.StatusOK, "ok\n"},
		{77, http.StatusServiceUnavailable, "keepalived pid 77 is a zombie\n"},
		{1234, http.StatusServiceUnavailable, "keepalived pid 1234 is gone"},
	} {
		s := newServer(t, Options{Plan: testPlan("t", "vb"), Signal: jsonSignal, Keepalived: newProcess(tt.pid), Proc: fixture})
		s.SetReady(true)
		paths := []string{"/healthz", "/readyz"}
		if tt.code == http.StatusOK {
			// /readyz would go on to signal the host's pid 42 for a dump.
			paths = paths[:1]
		}
		for _, path := range paths {
			if code, body := get(t, s.handler, path); code != tt.code || !strings.HasPrefix(body, tt.body) {
				t.Errorf("%s with pid %d: %d %q, want %d %q", path, tt.pid, code, body, tt.code, tt.body)
			}
		}
	}
}

// TestReadyz: ready means keepalived runs every planned instance, as its
// own JSON dump shows them: MASTER, a BACKUP that has heard a master, or
// FAULT.
func TestReadyz(t *testing.T) {
	f := startFake(t, "two-backup-errors.json")
	p := newProcess(f.pid)
	o := testOptions(p, f.dump)
	o.DumpMaxAge = -1 // every probe asks keepalived again
	o.DumpTimeout = time.Second
	o.Check = NewCheckMetrics()
	s := newServer(t, o)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not started yet") {
		t.Errorf("/readyz before SetReady: %d %q, want 503", code, body)
	}
	s.SetReady(true)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with T_VIP_1 and T_VIP_2 BACKUP: %d %q, want 200", code, body)
	}

	// T_VIP_2 still in INIT (state 0).
	dump, err := os.ReadFile(dumpFixture("two-master.json"))
	if err != nil {
		t.Fatal(err)
	}
	var instances []map[string]any
	if err := json.Unmarshal(dump, &instances); err != nil {
		t.Fatal(err)
	}
	instances[1]["data"].(map[string]any)["state"] = keepalived.StateInit
	writeJSON(t, f.fixture, instances)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || body != "keepalived does not run every instance yet: T_VIP_2 in INIT\n" {
		t.Errorf("/readyz with T_VIP_2 in INIT: %d %q, want 503 naming it", code, body)
	}
	// A BACKUP that has heard no master: nothing to take over from yet
	// (a unicast domain that is only forming); one that has, is ready.
	instances[1]["data"].(map[string]any)["state"] = keepalived.StateBackup
	writeJSON(t, f.fixture, instances)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || body != "keepalived does not run every instance yet: T_VIP_2 in BACKUP and has heard no master yet\n" {
		t.Errorf("/readyz with T_VIP_2 a BACKUP that heard no master: %d %q, want 503 naming it", code, body)
	}
	instances[1]["stats"].(map[string]any)["advert_rcvd"] = 1
	writeJSON(t, f.fixture, instances)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with T_VIP_2 a BACKUP that heard adverts: %d %q, want 200", code, body)
	}
	// FAULT runs the instance while the check fails (every instance
	// starts in FAULT until the built-in check first passes): the node
	// takes part, its check decides.
	instances[1]["data"].(map[string]any)["state"] = keepalived.StateFault
	writeJSON(t, f.fixture, instances)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || body != "keepalived does not run every instance yet: T_VIP_2 in FAULT while the check does not fail\n" {
		t.Errorf("/readyz with T_VIP_2 in FAULT before the check answered: %d %q, want 503 naming it", code, body)
	}
	o.Check.Passing(false)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with T_VIP_2 in FAULT: %d %q, want 200", code, body)
	}
	// The check passes again, keepalived's dump does not show it yet.
	o.Check.Passing(true)
	if code, _ := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with T_VIP_2 in FAULT and the check passing: %d, want 503", code)
	}
	o.Check.Passing(false)
	// An instance of the plan that keepalived does not have.
	writeJSON(t, f.fixture, instances[:1])
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || body != "keepalived does not run every instance yet: T_VIP_2 not set up\n" {
		t.Errorf("/readyz without T_VIP_2 in the dump: %d %q, want 503 naming it", code, body)
	}
	p.running.Store(false)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running") {
		t.Errorf("/readyz with keepalived stopped: %d %q, want 503", code, body)
	}
	if code, body := get(t, s.handler, "/"); code != http.StatusOK || !strings.Contains(body, `href="/metrics"`) {
		t.Errorf("GET /: %d %q", code, body)
	}
	if code, _ := get(t, s.handler, "/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", code)
	}
}

// TestReadyzWithoutDump: a keepalived that does not answer the dump signal
// (still starting, or hung) is not ready.
func TestReadyzWithoutDump(t *testing.T) {
	f := startFake(t, "ignore")
	o := testOptions(newProcess(f.pid), f.dump)
	o.DumpTimeout = 200 * time.Millisecond
	s := newServer(t, o)
	s.SetReady(true)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "asking keepalived for its instances: ") {
		t.Errorf("/readyz with no dump: %d %q, want 503", code, body)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveTCP runs s.Serve on a loopback port; stop ends it and returns what
// Serve returned.
func serveTCP(t *testing.T, s *Server) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	return ln.Addr().String(), func() error {
		cancel()
		return <-done
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	s := newServer(t, Options{Plan: testPlan("t", "vb"), Signal: jsonSignal, Keepalived: newProcess(os.Getpid())})
	addr, stop := serveTCP(t, s)

	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz over TCP: %d %q", resp.StatusCode, body)
	}
	if err := stop(); err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the server still answers after cancel")
	}
}

// TestComponentsInReadyz: a component of the run that does not work makes
// /readyz fail, naming it, and shows in ipfailover_component_up.
func TestComponentsInReadyz(t *testing.T) {
	f := startFake(t, "two-backup-errors.json")
	o := testOptions(newProcess(f.pid), f.dump)
	o.DumpMaxAge = -1
	health := []component.Health{
		{Name: "reaper", Role: component.Essential, Up: true},
		{Name: "split-brain-guard", Role: component.Auxiliary, Up: true},
	}
	var mu sync.Mutex
	o.Components = func() []component.Health {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(health)
	}
	o.AddrWatch = watchStats{Overflows: 3, Reopens: 1}
	s := newServer(t, o)
	s.SetReady(true)
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with every component up: %d %q, want 200", code, body)
	}
	mu.Lock()
	health[1].Up, health[1].Err, health[1].Failures = false, errors.New("the VRRP reader panicked: index out of range"), 1
	mu.Unlock()
	if code, body := get(t, s.handler, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "split-brain-guard: the VRRP reader panicked") {
		t.Errorf("/readyz with the guard down: %d %q, want 503 naming it", code, body)
	}
	_, body := get(t, s.handler, "/metrics")
	for _, want := range []string{
		`ipfailover_component_up{component="reaper",role="essential"} 1`,
		`ipfailover_component_up{component="split-brain-guard",role="auxiliary"} 0`,
		`ipfailover_component_failures_total{component="split-brain-guard"} 1`,
		`ipfailover_address_watch_overflows_total 3`,
		`ipfailover_address_watch_reopens_total 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

type watchStats host.WatchStats

func (w watchStats) WatchStats() host.WatchStats { return host.WatchStats(w) }

type panickingCollector struct{ desc *prometheus.Desc }

func (c panickingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c panickingCollector) Collect(chan<- prometheus.Metric)    { panic("a bug") }

// TestCollectorPanicContained: the registry runs collectors on goroutines
// of its own; a panic there is logged, not the end of the process.
func TestCollectorPanicContained(t *testing.T) {
	var log syncbuf.Buffer
	c := safeCollector{panickingCollector{prometheus.NewDesc("x", "x", nil, nil)}, slog.New(slog.NewTextHandler(&log, nil))}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "a metrics collector panicked") {
		t.Errorf("no log line:\n%s", log.String())
	}
}

// TestServeAnswersARequestUnderWayAsItStops: a probe accepted a moment
// before the run ends, its request still on its way in (half of it, or
// none yet), is answered, not closed without an answer (the kubelet's
// "Readiness probe failed: EOF").
func TestServeAnswersARequestUnderWayAsItStops(t *testing.T) {
	for _, before := range requestSplits {
		t.Run(before.name, func(t *testing.T) {
			s := newServer(t, Options{Plan: testPlan("t", "vb"), Signal: jsonSignal, Keepalived: newProcess(os.Getpid())})
			addr, stop := serveTCP(t, s)
			served := make(chan error, 1)
			answered := requestAcross(t, addr, s.conns, before.sent, func() { go func() { served <- stop() }() }, func() bool {
				// The listener closed: the server has begun to stop.
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Close()
				}
				return err != nil
			})
			if !strings.HasPrefix(answered, "HTTP/1.1 200") {
				t.Errorf("the request under way as the server stopped: %q, want its answer", answered)
			}
			if err := <-served; err != nil {
				t.Errorf("Serve after cancel: %v", err)
			}
		})
	}
}

// requestSplits are how much of its request a probe has sent when the
// server stops (requestAcross).
var requestSplits = []struct{ name, sent string }{
	{"half of the request sent", "GET /healthz HTTP/1.1\r\n"},
	{"connected, nothing sent yet", ""},
}

// requestAcross connects to addr, sends the part before of a GET /healthz,
// waits until the server has the connection (conns), calls stop, waits
// until the server is stopping, sends the rest, and returns what the
// server answered until it closed the connection.
func requestAcross(t *testing.T, addr string, conns *connLimit, before string, stop func(), stopping func() bool) string {
	t.Helper()
	const request = "GET /healthz HTTP/1.1\r\nHost: ipfailover\r\nConnection: close\r\n\r\n"
	if !strings.HasPrefix(request, before) {
		t.Fatalf("%q does not begin the request", before)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, before); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	waitFor("the server never took the connection", func() bool {
		conns.mu.Lock()
		defer conns.mu.Unlock()
		return len(conns.open) > 0 && (before == "" || heard(conns.order.Front().Value.(*connEntry).conn))
	})
	stop()
	waitFor("the server never began to stop", stopping)
	if _, err := io.WriteString(c, request[len(before):]); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer: %v (got %q)", err, b)
	}
	return string(b)
}
