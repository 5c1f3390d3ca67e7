package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/internal/check"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The flood rows: a program on another node floods the metrics port of a
// VIP's holder (floodScrapers connections scraping /metrics back to back,
// every request with a query string of its own, and floodIdle connections
// held open without a request), as any pod that reaches a node's address
// can. For FloodFor the holders must stay put while the kubelet's probes
// and a Prometheus keep asking; then the holder's service stops, and its
// VIPs must move within the failed check's bound, the flood going on.
const (
	rowFloodRSS     = "flood: holder's entrypoint peak RSS"
	rowFloodCPU     = "flood: holder's entrypoint CPU"
	rowFloodHealthz = "flood: GET /healthz on the holder, as the kubelet"
	rowFloodReadyz  = "flood: GET /readyz on the holder, as the kubelet"
	rowFloodScrape  = "flood: a Prometheus's scrape of the holder, answered"
	rowFloodCheck   = "flood: failed-check move of the flooded holder"
	// baselineSuffix names the rows of Options.FloodBaseline.
	baselineSuffix = ", baseline binary"

	floodScrapers = 200
	floodIdle     = 100
	// probeEvery and probeTimeout are the kubelet's probes as the bench
	// sends them: more often than the manifests' periods, with their
	// timeout.
	probeEvery   = 100 * time.Millisecond
	probeTimeout = 5 * time.Second
	// promEvery is the Prometheus's scrape interval.
	promEvery = time.Second
	// promAccept is what Prometheus 3 asks for by default.
	promAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

	targetFloodRSS   = 64.0
	targetFloodProbe = 1.0
)

// FloodResult is what the flooder saw, printed as JSON when it stops.
type FloodResult struct {
	// OK, Refused and Other count the scrapers' answers: 200, 503, other.
	OK, Refused, Other int64
	// Errors counts failed requests and connections; FirstError is the
	// first.
	Errors     int64
	FirstError string `json:",omitempty"`
	// IdleClosed counts the silent connections the server closed.
	IdleClosed int64
	Seconds    float64
}

// Flood is the flood rows' flooder, run as a program of its own on a node
// (test/cmd/bench runs itself with "flood"): it floods -url until SIGTERM,
// then prints a FloodResult. args are the flags after "flood". It returns
// the exit code.
func Flood(args []string) int {
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	target := fs.String("url", "", "the /metrics URL to flood (an IP literal and a port)")
	scrapers := fs.Int("scrapers", floodScrapers, "connections scraping back to back, every request with a query string of its own")
	idle := fs.Int("idle", floodIdle, "connections held open without a request, opened again when the server closes them")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		fmt.Fprintf(os.Stderr, "flood: -url %q: want http://ADDRESS:PORT/PATH\n", *target)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	res := flood(ctx, u, *scrapers, *idle)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 1
	}
	return 0
}

func flood(ctx context.Context, u *url.URL, scrapers, idle int) FloodResult {
	began := time.Now()
	var ok, refused, other, errs, closed atomic.Int64
	var once sync.Once
	var first string
	failed := func(err error) {
		if ctx.Err() != nil {
			return // cut short by the end of the flood
		}
		errs.Add(1)
		once.Do(func() { first = err.Error() })
		_ = sleep(ctx, 10*time.Millisecond)
	}
	var wg sync.WaitGroup
	for i := range scrapers {
		wg.Go(func() {
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for seq := 0; ctx.Err() == nil; seq++ {
				q := *u
				q.RawQuery = fmt.Sprintf("flood=%d-%d", i, seq)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.String(), http.NoBody)
				if err != nil {
					failed(err)
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					failed(err)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					failed(err)
				case resp.StatusCode == http.StatusOK:
					ok.Add(1)
				case resp.StatusCode == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	for range idle {
		wg.Go(func() {
			var d net.Dialer
			for ctx.Err() == nil {
				conn, err := d.DialContext(ctx, "tcp", u.Host)
				if err != nil {
					failed(err)
					continue
				}
				unblock := context.AfterFunc(ctx, func() { conn.Close() })
				// Blocks until the server closes the connection, or the
				// flood ends.
				_, _ = conn.Read(make([]byte, 1))
				unblock()
				conn.Close()
				if ctx.Err() == nil {
					closed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return FloodResult{OK: ok.Load(), Refused: refused.Load(), Other: other.Load(), Errors: errs.Load(), FirstError: first,
		IdleClosed: closed.Load(), Seconds: time.Since(began).Seconds()}
}

// probeResult is what one prober saw: the time of every request (until
// its answer or its failure), and the failures.
type probeResult struct {
	took, answered []time.Duration
	// failures counts the requests not answered 200, refused those
	// answered 503.
	failures, refused int
	first             error
	// failedAt are the failures' times from the start.
	failedAt []time.Duration
}

// probeLoop GETs target with client every interval until ctx ends. A
// request that fails, or is answered other than 200, is a failure; its
// time counts too.
func probeLoop(ctx context.Context, client *http.Client, target, accept string, interval time.Duration) probeResult {
	var res probeResult
	began := time.Now()
	for ctx.Err() == nil {
		start := time.Now()
		status, err := getOK(ctx, client, target, accept)
		took := time.Since(start)
		if ctx.Err() != nil {
			break
		}
		res.took = append(res.took, took)
		if err == nil {
			res.answered = append(res.answered, took)
		} else {
			res.failures++
			res.failedAt = append(res.failedAt, start.Sub(began).Round(time.Millisecond))
			if status == http.StatusServiceUnavailable {
				res.refused++
			}
			if res.first == nil {
				res.first = err
			}
		}
		_ = sleep(ctx, interval-min(took, interval))
	}
	return res
}

// getOK GETs target and reads the answer; an answer other than 200 is an
// error too. status is the answer's (0: none).
func getOK(ctx context.Context, client *http.Client, target, accept string) (status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
	if err != nil {
		return 0, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %s", target, resp.Status)
	}
	return resp.StatusCode, nil
}

// floodRound is one round's figures beyond the samples.
type floodRound struct {
	restRSS int64
	// cpu is the holder's entrypoint's CPU until the failover, in
	// percent of one core.
	cpu     float64
	stayed  bool
	flooder FloodResult
	// scrapes and probe failures of the Prometheus and the kubelet.
	promOK, promAll, promRefused int
	healthzBad, readyzBad        int
	// shed is the holder's own count of what its bounds turned away
	// (absent from builds without them).
	shed string
}

// floods measures the flood rows for the binary under test and, when
// set, Options.FloodBaseline, round by round in turn.
func (r *runner) floods(ctx context.Context) error {
	if r.o.Flooder == "" {
		return errors.New("the flood phase needs Options.Flooder")
	}
	for round := range r.o.Rounds {
		bins := []string{r.o.Binary}
		if r.o.FloodBaseline != "" {
			bins = append(bins, r.o.FloodBaseline)
		}
		for _, bin := range bins {
			suffix := ""
			if bin != r.o.Binary {
				suffix = baselineSuffix
			}
			r.o.Log.Info("flood round", "round", round+1, "of", r.o.Rounds, "binary", bin)
			if err := r.flood(ctx, bin, suffix, round); err != nil {
				return fmt.Errorf("%s: %w", bin, err)
			}
		}
	}
	return nil
}

// flood is one round for binary, whose rows carry suffix.
func (r *runner) flood(ctx context.Context, binary, suffix string, round int) error {
	small := VIPs(smallVIPs)
	f, err := r.startBinary(ctx, binary, Env(), small, "")
	if err != nil {
		return err
	}
	defer r.stop(f)
	holder := f.at.Holder(small[round%len(small)])
	i := slices.Index(r.c.Nodes, holder)
	from := r.c.Nodes[(i+1)%len(r.c.Nodes)]
	hp := f.proc(holder)
	// Let the start settle, as the scrape rows do.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	var fr floodRound
	if fr.restRSS, err = RSS(hp.Pid); err != nil {
		return err
	}
	metrics := netip.AddrPortFrom(holder.Addr4, 9650)
	out := lab.NewOutput(io.Discard)
	flooder, err := from.Start(ctx, []string{r.o.Flooder, "flood", "-url", "http://" + metrics.String() + "/metrics",
		"-scrapers", fmt.Sprint(floodScrapers), "-idle", fmt.Sprint(floodIdle)}, nil, out)
	if err != nil {
		return err
	}
	defer func() {
		_ = flooder.Kill()
		<-flooder.Done()
	}()

	// The kubelet probes from the node's own network namespace, a
	// connection per probe; the Prometheus scrapes from the client's,
	// over a kept-alive connection.
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	kubelet := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DialContext: holder.Dial, DisableKeepAlives: true}}
	prom := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: r.c.Client.Dial, MaxIdleConnsPerHost: 1}}
	defer prom.CloseIdleConnections()
	var healthz, readyz, scrapes probeResult
	wg.Go(func() { healthz = probeLoop(pctx, kubelet, "http://"+metrics.String()+"/healthz", "", probeEvery) })
	wg.Go(func() { readyz = probeLoop(pctx, kubelet, "http://"+metrics.String()+"/readyz", "", probeEvery) })
	wg.Go(func() { scrapes = probeLoop(pctx, prom, "http://"+metrics.String()+"/metrics", promAccept, promEvery) })

	// The holders stay put through the flood: the first snapshot that
	// shows another holder, or none, ends the wait early.
	cpu0, err := cpuTime(hp.Pid)
	if err != nil {
		return err
	}
	began := time.Now()
	hctx, cancel := context.WithTimeout(ctx, r.o.FloodFor)
	_, _, werr := r.w.Wait(hctx, 20*time.Millisecond, func(s Snapshot) bool {
		for _, v := range small {
			if hs := s.Holders(v); len(hs) != 1 || hs[0] != f.at.Holder(v) {
				return true
			}
		}
		return false
	})
	cancel()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case werr == nil:
		r.note("%s: a VIP left its holder during the flood, before the failover (round %d)", rowFloodCheck+suffix, round+1)
	case errors.Is(werr, context.DeadlineExceeded):
		fr.stayed = true
	default:
		return werr
	}
	cpu1, err := cpuTime(hp.Pid)
	if err != nil {
		return err
	}
	fr.cpu = 100 * (cpu1 - cpu0).Seconds() / time.Since(began).Seconds()
	if flooder.Exited() {
		return fmt.Errorf("the flooder on %s exited: %s", from.Name, out.String())
	}
	if fr.stayed {
		env := append(Env(), r.o.NodeEnv...)
		if err := randomPhase(ctx, checkPeriod(f.confs[holder.Name], env)); err != nil {
			return err
		}
		svc := r.svc[holder]
		delete(r.svc, holder)
		t0 := time.Now()
		svc.Stop()
		if err := r.move(ctx, f, holder, t0, rowFloodCheck+suffix, func(c *keepalived.Conf, prio int) time.Duration {
			return checkBound(c, env) + c.Skew(prio)
		}); err != nil {
			return err
		}
	}
	// VmHWM is the peak over the process's life: the flood's, as it
	// started small.
	m, err := Memory(hp.Pid)
	if err != nil {
		return err
	}
	r.addSize(rowFloodRSS+suffix, m["VmHWM"])
	fr.shed = shedCounters(ctx, prom, "http://"+metrics.String()+"/metrics")

	if err := flooder.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	wctx, cancelWait := context.WithTimeout(ctx, 20*time.Second)
	_, werr = flooder.Wait(wctx)
	cancelWait()
	stopProbes()
	wg.Wait()
	if werr != nil {
		return fmt.Errorf("waiting for the flooder: %w", werr)
	}
	if err := json.Unmarshal([]byte(tail(out.String(), 1)), &fr.flooder); err != nil {
		return fmt.Errorf("the flooder's result %q: %w", tail(out.String(), 1), err)
	}
	for _, p := range []struct {
		row string
		res probeResult
		bad *int
	}{{rowFloodHealthz, healthz, &fr.healthzBad}, {rowFloodReadyz, readyz, &fr.readyzBad}} {
		for _, d := range p.res.took {
			r.add(p.row+suffix, Sample{Value: d})
		}
		*p.bad = p.res.failures
		if p.res.failures > 0 {
			r.note("%s: %d of %d probes failed, at %v from the flood's start, first: %v", p.row+suffix, p.res.failures, len(p.res.took), p.res.failedAt, p.res.first)
		}
	}
	fr.promAll, fr.promOK, fr.promRefused = len(scrapes.took), len(scrapes.answered), scrapes.refused
	for _, d := range scrapes.answered {
		r.add(rowFloodScrape+suffix, Sample{Value: d})
	}
	r.mu.Lock()
	r.floodRounds[suffix] = append(r.floodRounds[suffix], fr)
	r.mu.Unlock()
	r.o.Log.Info("flood", "binary", binary, "holder", holder.Name, "from", from.Name, "rest_rss_kb", fr.restRSS>>10,
		"flooder", fmt.Sprintf("%+v", fr.flooder), "prometheus_ok", fmt.Sprintf("%d/%d (%d refused)", fr.promOK, fr.promAll, fr.promRefused), "shed", fr.shed)
	return nil
}

// shedCounters reads, from the holder's own metrics, what its listener's
// bounds turned away; "" from a build without them. A scrape refused under
// the flood is tried again.
func shedCounters(ctx context.Context, client *http.Client, target string) string {
	for range 20 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
		if err != nil {
			return ""
		}
		resp, err := client.Do(req)
		if err != nil {
			return ""
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return ""
		}
		if resp.StatusCode != http.StatusOK {
			if sleep(ctx, 50*time.Millisecond) != nil {
				return ""
			}
			continue
		}
		var out []string
		for line := range strings.SplitSeq(string(b), "\n") {
			if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "ipfailover_metrics_") {
				out = append(out, strings.TrimPrefix(name, "ipfailover_metrics_")+"="+v)
			}
		}
		return strings.Join(out, " ")
	}
	return "no scrape answered"
}

// floodRows are the flood rows: the binary under test's, then the
// baseline's. The caller holds r.mu.
func (r *runner) floodRows() []Row {
	var rows []Row
	for _, suffix := range []string{"", baselineSuffix} {
		rounds := r.floodRounds[suffix]
		if len(rounds) == 0 {
			continue
		}
		var rest []int64
		var cpu []float64
		var fl FloodResult
		var stayed, promOK, promAll, promRefused, healthzBad, readyzBad int
		var shed []string
		for _, fr := range rounds {
			rest = append(rest, fr.restRSS)
			cpu = append(cpu, fr.cpu)
			if fr.stayed {
				stayed++
			}
			promOK, promAll, promRefused = promOK+fr.promOK, promAll+fr.promAll, promRefused+fr.promRefused
			healthzBad, readyzBad = healthzBad+fr.healthzBad, readyzBad+fr.readyzBad
			fl.OK, fl.Refused, fl.Other, fl.Errors = fl.OK+fr.flooder.OK, fl.Refused+fr.flooder.Refused, fl.Other+fr.flooder.Other, fl.Errors+fr.flooder.Errors
			fl.IdleClosed, fl.Seconds = fl.IdleClosed+fr.flooder.IdleClosed, fl.Seconds+fr.flooder.Seconds
			if fl.FirstError == "" {
				fl.FirstError = fr.flooder.FirstError
			}
			if fr.shed != "" {
				shed = append(shed, fr.shed)
			}
		}
		rss := SizeRow(rowFloodRSS+suffix, MB, r.sizes[rowFloodRSS+suffix], "")
		rss.Check("worst", targetFloodRSS)
		rss.Note = fmt.Sprintf("VmHWM of the holder's ipfailover after %v of flood and the failover under it: a program on the next node scrapes /metrics over %d connections back to back, every request with a query string of its own, and holds %d connections open without a request; %.1f MB at rest before (median)",
			r.o.FloodFor, floodScrapers, floodIdle, SizeRow("", MB, rest, "").Median)
		probes := func(row string, bad int) Row {
			p := TimeRow(row+suffix, r.samples[row+suffix], "", "")
			p.Check("worst", targetFloodProbe)
			if bad > 0 {
				fail := false
				p.Pass = &fail
			}
			p.Note = fmt.Sprintf("from the holder's own network namespace, a new connection every %v, timeout %v, through the flood and the failover; %d failed (counted at the time they took)", probeEvery, probeTimeout, bad)
			return p
		}
		scrape := TimeRow(rowFloodScrape+suffix, r.samples[rowFloodScrape+suffix], "", "")
		scrape.Note = fmt.Sprintf("from the client's namespace every %v over a kept-alive connection, with Prometheus 3's Accept header: %d of %d answered 200, %d refused (503), %d failed otherwise", promEvery, promOK, promAll, promRefused, promAll-promOK-promRefused)
		chk := TimeRow(rowFloodCheck+suffix, r.samples[rowFloodCheck+suffix], fmt.Sprintf("check period + %d × %s (%d failures in a row) + the best backup's skew", check.Fall-1, check.Retry, check.Fall), "")
		chk.Check("median", targetCheck)
		chk.CheckWorst(targetCheckWorst)
		if stayed < len(rounds) {
			fail := false
			chk.Pass = &fail
		}
		rate := func(n int64) float64 { return float64(n) / max(fl.Seconds, 1e-9) }
		chk.Note = fmt.Sprintf("the holder's service stopped after %v of flood, the flood going on; the holders stayed put through the flood in %d of %d rounds; the flooder's scrapes per second: %.0f answered 200, %.0f refused (503), %.0f other, %.0f failed; the server closed %d of its silent connections",
			r.o.FloodFor, stayed, len(rounds), rate(fl.OK), rate(fl.Refused), rate(fl.Other), rate(fl.Errors), fl.IdleClosed)
		if fl.FirstError != "" {
			chk.Note += "; first failure: " + fl.FirstError
		}
		if len(shed) > 0 {
			chk.Note += "; the holder's own counts, per round: " + strings.Join(shed, ", ")
		}
		cpuRow := PercentRow(rowFloodCPU+suffix, cpu, fmt.Sprintf("user and system time of the holder's ipfailover over the %v of flood before the failover (/proc/PID/stat), of one core", r.o.FloodFor))
		rows = append(rows, rss, cpuRow, probes(rowFloodHealthz, healthzBad), probes(rowFloodReadyz, readyzBad), scrape, chk)
	}
	return rows
}

// cpuTime is the user and system time pid has used (/proc/PID/stat, in
// clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis, from the state
	// on: utime and stime are the 12th and 13th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
