package metrics

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/proc"
	"github.com/ipfailover/ipfailover/test/nstest"
	"github.com/ipfailover/ipfailover/test/syncbuf"
	"github.com/ipfailover/ipfailover/test/wait"
)

// keepalivedLab is a real keepalived in its own network namespace.
type keepalivedLab struct {
	proc *process
	dump string
	out  *syncbuf.Buffer
	ns   netns.NsHandle
}

// dumpsPrinted counts keepalived's "Printing VRRP as json" log lines, one per dump signal.
func (k *keepalivedLab) dumpsPrinted() int {
	return strings.Count(k.out.String(), "Printing VRRP as json")
}

// List lists the namespace's addresses on iface, as the host package does in the root namespace.
func (k *keepalivedLab) List(iface string) ([]netip.Prefix, error) {
	h, err := netlink.NewHandleAt(k.ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	link, err := h.LinkByName(iface)
	if err != nil {
		return nil, err
	}
	as, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range as {
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

const labConfig = `global_defs {
	router_id metrics_test
	max_auto_priority
}
vrrp_instance T_VIP_1 {
	interface va
	virtual_router_id 51
	priority 200
	advert_int 1
	virtual_ipaddress {
		192.0.2.100/32 dev va
	}
}
vrrp_instance T_VIP_2 {
	interface va
	virtual_router_id 52
	priority 100
	advert_int 1
	virtual_ipaddress {
		192.0.2.101/32 dev va
	}
}
`

// labPlan is labConfig as ipfailover would have planned it.
var labPlan = testPlan("metrics-test", "va",
	instance("T_VIP_1", "va", 51, 200, "192.0.2.100"),
	instance("T_VIP_2", "va", 52, 100, "192.0.2.101"))

// startKeepalived starts Debian's keepalived with labConfig in a fresh network namespace whose
// veth pair va/vb carries 192.0.2.1/24. Its dump goes to a private TMPDIR.
func startKeepalived(t testing.TB) *keepalivedLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and runs keepalived")
	}
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("keepalived is not installed")
	}
	name := nstest.New(t, "metrics")
	nstest.Veth(t, name, "va", "vb")
	nstest.IP(t, name, "addr", "add", "192.0.2.1/24", "dev", "va")
	nstest.IP(t, name, "link", "set", "lo", "up")
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })

	dir := t.TempDir()
	conf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(conf, []byte(labConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	// ip netns exec execs keepalived, so the PID is keepalived's parent process.
	cmd := exec.Command("ip", "netns", "exec", name, "keepalived", "-n", "--log-console", "--no-syslog", "-f", conf,
		"-p", filepath.Join(dir, "keepalived.pid"), "-r", filepath.Join(dir, "vrrp.pid"), "-c", filepath.Join(dir, "checkers.pid"))
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &keepalivedLab{proc: newProcess(cmd.Process.Pid), dump: filepath.Join(dir, "keepalived.json"), out: out, ns: ns}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("keepalived output:\n%s", out.String())
		}
	})
	wait.For(t, "keepalived to start its VRRP child", func() bool {
		return strings.Contains(out.String(), "Startup complete")
	})
	return k
}

func (k *keepalivedLab) options() Options {
	return Options{
		Plan:             labPlan,
		Keepalived:       k.proc,
		KeepalivedBinary: keepalived.FindBinary(),
		VIPs:             k,
		DumpPath:         k.dump,
		Version:          "test",
	}
}

// TestRealKeepalived runs the collector against Debian's keepalived 2.2.7.
func TestRealKeepalived(t *testing.T) {
	k := startKeepalived(t)
	o := k.options()
	o.DumpMaxAge = -1
	s := newServer(t, o)

	master := map[string]string{"name": "T_VIP_1", "intf": "va", "vrid": "51"}
	wait.For(t, "both instances to become MASTER", func() bool {
		return gauge(t, s, "keepalived_vrrp_state", master) == keepalived.StateMaster &&
			gauge(t, s, "keepalived_vrrp_state", map[string]string{"name": "T_VIP_2"}) == keepalived.StateMaster
	})
	// The compatible counters carry the state name as a label.
	sent := gauge(t, s, "keepalived_vrrp_advert_sent", map[string]string{"name": "T_VIP_1", "state": "MASTER"})
	wait.For(t, "advert_sent to grow", func() bool {
		return gauge(t, s, "keepalived_vrrp_advert_sent", map[string]string{"name": "T_VIP_1", "state": "MASTER"}) > sent
	})
	wait.For(t, "the kernel to hold both VIPs", func() bool {
		return gauge(t, s, "ipfailover_vip_held", map[string]string{"vip": "192.0.2.100"}) == 1 &&
			gauge(t, s, "ipfailover_vip_held", map[string]string{"vip": "192.0.2.101"}) == 1
	})
	if got := gauge(t, s, "keepalived_up", nil); got != 1 {
		t.Errorf("keepalived_up = %v, want 1", got)
	}
	if at := gauge(t, s, "ipfailover_vrrp_last_transition_timestamp_seconds", master); at < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last transition %v is not recent", at)
	}
	if problems, err := testutil.CollectAndLint(s.collector); err != nil {
		t.Error(err)
	} else {
		for _, p := range problems {
			if !strings.HasPrefix(p.Metric, "keepalived_vrrp_") {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		}
	}
	// Every signal was keepalived's JSON dump: it printed one dump per signal, and stayed up.
	if !k.proc.Running() || alive(proc.FS{}, k.proc) != nil {
		t.Fatalf("keepalived died: %v", alive(proc.FS{}, k.proc))
	}
	if got, want := k.dumpsPrinted(), int(s.collector.dumper.signals.Load()); got != want {
		t.Errorf("keepalived printed %d dumps for %d signals", got, want)
	}
}

// TestRealKeepalivedConcurrentScrapes: parallel scrapes share one dump of the real keepalived.
func TestRealKeepalivedConcurrentScrapes(t *testing.T) {
	k := startKeepalived(t)
	o := k.options()
	o.DumpMaxAge = time.Hour
	s := newServer(t, o)
	scrapeConcurrently(t, s, maxScrapes)
	wait.For(t, "keepalived to log its dump", func() bool { return k.dumpsPrinted() >= 1 })
	if n := k.dumpsPrinted(); n != 1 {
		t.Errorf("%d parallel scrapes made keepalived print %d dumps, want 1", maxScrapes, n)
	}
}

// TestRealKeepalivedDies: when keepalived dies, /healthz fails and keepalived_up is 0.
func TestRealKeepalivedDies(t *testing.T) {
	k := startKeepalived(t)
	s := newServer(t, k.options())
	if code, body := get(t, s.handler, "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if err := syscall.Kill(k.proc.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "/healthz to fail", func() bool {
		code, _ := get(t, s.handler, "/healthz")
		return code == 503
	})
	// The supervisor has not noticed yet: the scrape signals a dead PID and reports it.
	if got := gauge(t, s, "keepalived_up", nil); got != 0 {
		t.Errorf("keepalived_up = %v after SIGKILL, want 0", got)
	}
}

// BenchmarkScrape measures one full /metrics scrape: taking a fresh dump each time from the
// real keepalived (root only) and from a fixture served by the fake keepalived (whose deliberate
// half-write pause dominates), and reusing one dump of the fixture, which
// is this package's own cost.
func BenchmarkScrape(b *testing.B) {
	bench := func(b *testing.B, o Options, maxAge time.Duration) {
		o.DumpMaxAge = maxAge
		s := newServer(b, o)
		var times []time.Duration
		b.ResetTimer()
		for b.Loop() {
			start := time.Now()
			code, body := get(b, s.handler, "/metrics")
			times = append(times, time.Since(start))
			if code != 200 || !strings.Contains(body, "\nkeepalived_up 1\n") {
				b.Fatalf("scrape: %d\n%s", code, body)
			}
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
		b.ReportMetric(float64(slices.Max(times).Microseconds())/1000, "ms-max")
	}
	b.Run("keepalived", func(b *testing.B) {
		k := startKeepalived(b)
		bench(b, k.options(), -1)
		b.Logf("keepalived printed %d dumps", k.dumpsPrinted())
	})
	b.Run("fixture", func(b *testing.B) {
		f := startFake(b, "two-master.json")
		bench(b, testOptions(newProcess(f.pid), f.dump), -1)
	})
	b.Run("fixture-reused", func(b *testing.B) {
		f := startFake(b, "two-master.json")
		bench(b, testOptions(newProcess(f.pid), f.dump), time.Hour)
	})
}
