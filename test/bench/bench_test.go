package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

func TestBestBackup(t *testing.T) {
	vip := netip.MustParseAddr("198.51.100.1")
	conf := func(p int) *keepalived.Conf {
		return &keepalived.Conf{AdvertInt: time.Second, Instances: []keepalived.ConfInstance{{Priority: p, VIPs: []netip.Addr{vip}}}}
	}
	confs := map[string]*keepalived.Conf{"node1": conf(235), "node2": conf(249), "node3": conf(233)}
	node, prio, _, err := BestBackup(confs, "node2", vip)
	if err != nil || node != "node1" || prio != 235 {
		t.Errorf("BestBackup = %s %d %v, want node1 235", node, prio, err)
	}
	if _, _, _, err := BestBackup(confs, "node2", netip.MustParseAddr("198.51.100.9")); err == nil {
		t.Error("BestBackup of an unknown VIP: no error")
	}
	if top, p := topNode(confs, vip); top != "node2" || p != 249 {
		t.Errorf("topNode = %s %d, want node2 249", top, p)
	}
}

func TestStats(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name               string
		in                 []time.Duration
		median, p99, worst time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"odd", ms(30, 10, 20), 20 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond},
		{"even", ms(40, 10, 20, 30), 25 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Median(tc.in); got != tc.median {
				t.Errorf("Median = %v, want %v", got, tc.median)
			}
			if got := Quantile(tc.in, 0.99); got != tc.p99 {
				t.Errorf("p99 = %v, want %v", got, tc.p99)
			}
			if got := Worst(tc.in); got != tc.worst {
				t.Errorf("Worst = %v, want %v", got, tc.worst)
			}
		})
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond
	}
	if got := Quantile(hundred, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 of 1..100 ms = %v, want 99ms", got)
	}
	if got := Quantile(hundred, 0.5); got != 50*time.Millisecond {
		t.Errorf("p50 of 1..100 ms = %v, want 50ms", got)
	}
}

func TestRowsAndReport(t *testing.T) {
	ss := []Sample{
		{Value: 90 * time.Millisecond, Limit: 82 * time.Millisecond},
		{Value: 20 * time.Millisecond, Limit: 12 * time.Millisecond},
		{Value: 30 * time.Millisecond, Limit: 27 * time.Millisecond},
	}
	r := TimeRow("graceful", ss, "skew", "0.86 s")
	r.Check("median", 0.1)
	if r.N != 3 || r.Median != 0.03 || r.Worst != 0.09 || r.Limit != 0.027 || !*r.Pass {
		t.Errorf("TimeRow = %+v", r)
	}
	if want := 20.0 / 12; r.WorstRatio != want {
		t.Errorf("WorstRatio = %v, want %v", r.WorstRatio, want)
	}
	mem := SizeRow("rss", MB, []int64{12 << 20, 22 << 20}, "")
	mem.Check("worst", 18.8)
	if mem.Median != 17 || mem.Worst != 22 || *mem.Pass {
		t.Errorf("SizeRow = %+v", mem)
	}
	if cpu := PercentRow("cpu", []float64{0.5, 0.1, 0.3}, ""); cpu.Median != 0.3 || cpu.Worst != 0.5 || cpu.Samples[0] != 0.5 {
		t.Errorf("PercentRow = %+v, want median 0.3, worst 0.5, samples in their order", cpu)
	}
	empty := TimeRow("none", nil, "", "")
	empty.Check("median", 1)
	if *empty.Pass {
		t.Error("a row without samples passes")
	}

	rep := &Report{Commit: "abc", Rounds: 1, PollInterval: 0.005, Rows: []Row{r, mem, empty}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"graceful", "30.0 ms", "90.0 ms", "27.0 ms", "1.11x", "median < 100.0 ms ok", "worst < 18.8 MB MISS", "0.86 s"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| graceful | 30.0 ms | 90.0 ms | 27.0 ms | 0.86 s |", "| none | - | - |  |  |", "at commit abc on "} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 3 || back.Rows[0].Median != 0.03 || back.Commit != "abc" {
		t.Errorf("JSON round trip: %+v", back)
	}
}

func TestVIPs(t *testing.T) {
	if got := VIPs(scaleVIPs); len(got) != 254 || got[0].String() != "198.51.100.1" || got[253].String() != "198.51.100.254" {
		t.Errorf("VIPs(%s) = %d addresses from %v", scaleVIPs, len(got), got)
	}
	if got := VIPs("192.0.2.7"); len(got) != 1 {
		t.Errorf("VIPs(single) = %v", got)
	}
}

func TestSettle(t *testing.T) {
	if got := settle(Env()); got != 1500*time.Millisecond {
		t.Errorf("settle at 1 s = %v", got)
	}
	if got := settle(Env("OPENSHIFT_HA_ADVERT_INTERVAL=0.1")); got != 500*time.Millisecond {
		t.Errorf("settle at 0.1 s = %v", got)
	}
}

// TestWatcherAndService runs on a one-node lab cluster: the watcher sees an
// address appear that netlink added, and the service accepts connections
// in the node until stopped.
func TestWatcherAndService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("builds a network namespace: needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := lab.New(ctx, lab.Options{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	n := c.Nodes[0]
	w, err := NewWatcher(c.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	vip := netip.MustParseAddr("198.51.100.7")
	if s, err := w.Snapshot(); err != nil || s.Holder(vip) != nil || s.Holder(n.Addr4) != n {
		t.Fatalf("before: holder of %s %v, of %s %v, err %v", vip, s.Holder(vip), n.Addr4, s.Holder(n.Addr4), err)
	}
	if _, err := n.Exec(ctx, "ip", "addr", "add", vip.String()+"/32", "dev", lab.Link); err != nil {
		t.Fatal(err)
	}
	s, gap, err := w.Wait(ctx, time.Millisecond, func(s Snapshot) bool { return s.Holder(vip) == n })
	if err != nil {
		t.Fatal(err)
	}
	if !s.OneHolder([]netip.Addr{vip}) || len(s.Holders(vip, n)) != 0 || gap < 0 {
		t.Errorf("snapshot: one holder %v, holders skipping %s %v", s.OneHolder([]netip.Addr{vip}), n.Name, s.Holders(vip, n))
	}
	st, err := w.WaitSettled(ctx, time.Millisecond, 20*time.Millisecond, []netip.Addr{vip}, func() error { return nil }, func(Snapshot, string) {})
	if err != nil || st.At.Holder(vip) != n || st.Split != 0 {
		t.Errorf("WaitSettled = %+v, %v", st, err)
	}
	if err := w.Release([]netip.Addr{vip}); err != nil {
		t.Fatal(err)
	}
	if s, _ := w.Snapshot(); s.Holder(vip) != nil {
		t.Errorf("%s still on %s after Release", vip, n.Name)
	}

	addr := netip.AddrPortFrom(n.Addr4, MonitorPort).String()
	svc, err := lab.ListenIn(n.Netns, addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.Client.Dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial the service: %v", err)
	}
	conn.Close()
	svc.Stop()
	svc.Stop()
	if conn, err := c.Client.Dial(ctx, "tcp", addr); err == nil {
		conn.Close()
		t.Error("the stopped service still accepts")
	} else if _, ok := err.(*net.OpError); !ok {
		t.Logf("dial after Stop: %v", err)
	}
}

// TestLinePrefixer: every line gets a time and the prefix; marked() is when the first line
// containing the mark arrived, and stays zero until then.
func TestLinePrefixer(t *testing.T) {
	var out strings.Builder
	l := newLinePrefixer(&out, "node2: ", "Entering BACKUP STATE")
	io.WriteString(l, "starting\n(VI_1) Entering BACK")
	if !l.marked().IsZero() {
		t.Fatalf("marked at %v before the mark's line was whole", l.marked())
	}
	before := time.Now()
	io.WriteString(l, "UP STATE\n")
	first := l.marked()
	if first.Before(before) {
		t.Fatalf("marked() = %v, want a time after %v", first, before)
	}
	io.WriteString(l, "(VI_2) Entering BACKUP STATE\n")
	if l.marked() != first {
		t.Errorf("a second marked line moved marked() from %v to %v", first, l.marked())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3: %q", len(lines), out.String())
	}
	for _, line := range lines {
		stamp, rest, ok := strings.Cut(line, " ")
		if _, err := time.Parse("15:04:05.000", stamp); !ok || err != nil || !strings.HasPrefix(rest, "node2: ") {
			t.Errorf("line %q lacks the time and the prefix", line)
		}
	}
}

// TestCheckTargetsAndCPURows: the failed-check row passes only with both
// its median and its worst under their targets; CPU rows read percent.
func TestCheckTargetsAndCPURows(t *testing.T) {
	ss := []Sample{{Value: 200 * time.Millisecond}, {Value: 250 * time.Millisecond}, {Value: 600 * time.Millisecond}}
	r := TimeRow("check", ss, "", "")
	r.Check("median", 0.3)
	r.CheckWorst(0.5)
	if *r.Pass {
		t.Errorf("a worst of 600 ms passes a 500 ms target: %+v", r)
	}
	r = TimeRow("check", ss[:2], "", "")
	r.Check("median", 0.3)
	r.CheckWorst(0.5)
	if !*r.Pass {
		t.Errorf("median 225 ms, worst 250 ms fail: %+v", r)
	}
	const mb = 1 << 20
	ss3 := []cpuSample{
		{entrypoint: 0.125, keepalived: 0.5, entrypointRSS: 10 * mb, keepalivedRSS: 6 * mb, peakRSS: 20 * mb},
		{entrypoint: 0.25, keepalived: 0.25, entrypointRSS: 12 * mb, keepalivedRSS: 8 * mb, peakRSS: 30 * mb},
		{entrypoint: 0.5, keepalived: 0.375, entrypointRSS: 14 * mb, keepalivedRSS: 4 * mb, peakRSS: 25 * mb},
	}
	cpu := cpuRow("CPU at rest", ss3, 10*time.Second)
	if cpu.Median != 0.625 || cpu.Worst != 0.875 || cpu.N != 3 || !strings.Contains(cpu.Note, "entrypoint 0.250 %, keepalived and its scripts 0.375 %") {
		t.Errorf("cpuRow = %+v", cpu)
	}
	rss := rssRow("CPU at rest", ss3)
	if rss.Name != "RSS at rest" || rss.Median != 18 || rss.Worst != 20 || rss.N != 3 ||
		!strings.Contains(rss.Note, "entrypoint 12.0 MB, keepalived's processes 6.0 MB") || !strings.Contains(rss.Note, "30.0 MB at worst") {
		t.Errorf("rssRow = %+v", rss)
	}
	rep := &Report{Rows: []Row{r, cpu}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"median < 300.0 ms, worst < 500.0 ms ok", "0.625 %"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}

func TestCheckBound(t *testing.T) {
	builtin := &keepalived.Conf{CheckFile: keepalived.CheckFile}
	script := &keepalived.Conf{CheckInterval: 2 * time.Second}
	for _, tt := range []struct {
		name          string
		c             *keepalived.Conf
		env           []string
		period, bound time.Duration
	}{
		{"built-in, default", builtin, Env(), 150 * time.Millisecond, 270 * time.Millisecond},
		{"built-in, set", builtin, Env("OPENSHIFT_HA_CHECK_INTERVAL=0.5"), 500 * time.Millisecond, 620 * time.Millisecond},
		{"script", script, Env(), 2 * time.Second, 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if p, b := checkPeriod(tt.c, tt.env), checkBound(tt.c, tt.env); p != tt.period || b != tt.bound {
				t.Errorf("period %s bound %s, want %s %s", p, b, tt.period, tt.bound)
			}
		})
	}
	n := &lab.Node{Addr4: netip.MustParseAddr("192.0.2.12")}
	if got := forNode([]string{"A=/x {node} 8080", "B=c"}, n); got[0] != "A=/x 192.0.2.12 8080" || got[1] != "B=c" {
		t.Errorf("forNode = %q", got)
	}
}
