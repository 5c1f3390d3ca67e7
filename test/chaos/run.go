package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/check"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/bench"
)

// Options shape a run.
type Options struct {
	// Seed draws the schedule; Duration is the run's length, faults and
	// the settling tail included.
	Seed     uint64
	Duration time.Duration
	// Binary is the ipfailover binary, Self this program (the nodes'
	// service runs it as "serve"); neither under /tmp, which the nodes
	// mount over.
	Binary, Self string
	// AdvertInterval is OPENSHIFT_HA_ADVERT_INTERVAL ("": unset, 1 s).
	AdvertInterval string
	// Out is the directory the report and pictures go to.
	Out string
	// Progress gets a line per fault and a status line every
	// StatusEvery; Log gets the lab's own lines (warnings unless
	// Verbose) and NodeOut, when set, every node's output.
	Progress io.Writer `json:"-"`
	Log      io.Writer `json:"-"`
	Verbose  bool
	NodeOut  io.Writer `json:"-"`
	// Commit names the build in the report.
	Commit string
	// Target is "lab" (the default) or "kube": the real cluster of
	// test/kube, brought up in KubeDir from the binaries in KubeBin, with
	// the image Image (make image) imported into every node.
	Target                  string
	KubeDir, KubeBin, Image string
	// MoreImages are imported into every node beside Image.
	MoreImages []string
}

func (o Options) logWriter() io.Writer {
	if o.Log == nil {
		return io.Discard
	}
	return o.Log
}

// Timing of the client and the judgement.
const (
	// ProbeInterval is how often the client probes each VIP.
	ProbeInterval = 10 * time.Millisecond
	// ProbeDeadline is how long a probe waits for its answer: above the
	// round trips of a segment delayed by 40 ± 20 ms each way.
	ProbeDeadline = 250 * time.Millisecond
	// GracefulBound is the bound on a graceful handover.
	GracefulBound = 100 * time.Millisecond
	// limitMargin is added to the failed-check and dead-node bounds: the
	// probes' resolution, the client's round trip and the scheduling of a
	// busy 2-core machine (the bench's crash rows allow the same).
	limitMargin = 100 * time.Millisecond
	// DupBound is how long a VIP may stay on two nodes once the faults in
	// progress during it are over: the time the split-brain detector needs
	// to call it a duplicate (a first round of 2 s, a confirming one of
	// 1 s).
	DupBound = 3 * time.Second
	// StatusEvery is the period of the progress's status lines.
	StatusEvery = 30 * time.Second
)

// advertOf parses OPENSHIFT_HA_ADVERT_INTERVAL's value (1 s when empty).
func advertOf(v string) time.Duration {
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
		return time.Duration(f * float64(time.Second))
	}
	return time.Second
}

// fleetAdvert is the interval at which the fleet of o sends adverts: the
// one set, or on the cluster (pods mode, a few VIPs) the fleet's fast
// default, else keepalived's 1 s.
func fleetAdvert(o Options) time.Duration {
	if o.AdvertInterval == "" && o.Target == "kube" {
		return config.FastAdvertInterval
	}
	return advertOf(o.AdvertInterval)
}

// longestAdvert is the longest advert_int among the nodes' configurations
// (0 when none was read): a fleet whose pods disagree for a moment is as
// slow as its slowest.
func longestAdvert(cfgs map[string]*keepalived.Conf) time.Duration {
	var longest time.Duration
	for _, c := range cfgs {
		if c != nil {
			longest = max(longest, c.AdvertInt)
		}
	}
	return longest
}

// Result is a finished run.
type Result struct {
	Schedule Schedule
	Data     *Data
	// Analysis is Analyse(Data): not recorded (Reanalyse computes it).
	Analysis Analysis `json:"-"`
	// Checks are the invariants at the end and after the shutdown.
	Checks []Check
	// Problems are what went wrong in the nemesis or the observation
	// (a fault it could not inject, lost netlink notifications).
	Problems []string
	// Report is the Markdown report's path, Pictures the timelines'.
	Report   string
	Pictures []string
	// Load is the machine's 1-minute load average at the start, at every
	// status line and at the end: the other programs the run shared the
	// cores with.
	Load []float64
}

// Pass reports whether the run met every limit and invariant.
func (r *Result) Pass() bool {
	if len(r.Analysis.Violations) > 0 || len(r.Problems) > 0 {
		return false
	}
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// target is where a run injects faults: the namespace lab, or a cluster.
type target interface {
	name() string
	nodeNames() []string
	vips() []netip.Addr
	settings() []string
	observed() []Observed
	clientNetns() string
	// dialer returns the client's dialer and what closes it.
	dialer() (Dialer, func(), error)
	start(ctx context.Context) error
	configs() map[string]*keepalived.Conf
	inject(ctx context.Context, f Fault, rec *Record, began func()) error
	settled(ctx context.Context) []Check
	shutdown(ctx context.Context) []Check
	close() error
}

// Run plans the schedule of o.Seed, builds the lab, runs the faults while
// the client probes, checks the invariants, shuts everything down and
// writes the report. An error means the run could not be carried out; a
// run that was carried out returns its Result, pass or fail.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Target == "kube" {
		t, err := newKubeTarget(ctx, o)
		if err != nil {
			return nil, err
		}
		defer t.close()
		return run(ctx, o, t, KubeProfile(len(t.nodeNames())))
	}
	t, err := newLabTarget(ctx, o)
	if err != nil {
		return nil, err
	}
	defer t.close()
	return run(ctx, o, t, DefaultProfile(len(t.nodeNames()), LabKinds))
}

func run(ctx context.Context, o Options, t target, prof Profile) (*Result, error) {
	out := o.Progress
	if out == nil {
		out = io.Discard
	}
	names := t.nodeNames()
	sched := Plan(o.Seed, o.Duration, prof)
	fmt.Fprintf(out, "chaos: %s, %d nodes, VIPs %v, advert interval %s\n", t.name(), len(names), t.vips(), fleetAdvert(o))
	fmt.Fprint(out, sched.String(names))

	began := time.Now()
	if err := t.start(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "fleet settled in %s\n", time.Since(began).Round(time.Millisecond))

	obs, err := Observe(t.observed(), t.clientNetns(), t.vips())
	if err != nil {
		return nil, err
	}
	var targets []netip.AddrPort
	for _, v := range t.vips() {
		targets = append(targets, netip.AddrPortFrom(v, ServicePort))
	}
	// Then every node's own addresses, the controls: see Data.Controls
	// and Controls6.
	for _, n := range t.observed() {
		targets = append(targets, netip.AddrPortFrom(n.Addr4, ServicePort))
	}
	for _, n := range t.observed() {
		targets = append(targets, netip.AddrPortFrom(n.Addr6, ServicePort))
	}
	dial, closeDialer, err := t.dialer()
	if err != nil {
		obs.Stop()
		return nil, err
	}
	defer closeDialer()
	prober := StartProber(ctx, dial, targets, ProbeInterval, ProbeDeadline)
	d := &Data{Nodes: names, VIPs: t.vips(), Allowance: 3*advertOf(o.AdvertInterval) + time.Second, Advert: fleetAdvert(o), Lead: ProbeDeadline, DupBound: DupBound}
	// A second of answers before the first fault shows every VIP answered.
	if err := sleep(ctx, time.Second); err != nil {
		prober.Stop()
		obs.Stop()
		return nil, err
	}
	d.Start = time.Now()
	fmt.Fprintf(out, "%8s  probing %d VIPs and %d nodes' own IPv4 and IPv6 addresses every %s from the client\n", "0.000s", len(t.vips()), len(names), ProbeInterval)

	res := &Result{Schedule: sched, Data: d, Load: loadAverage(nil)}
	recs := make([]Record, len(sched.Faults))
	var wg sync.WaitGroup
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%8s  %s\n", fmtOffset(time.Since(d.Start)), fmt.Sprintf(format, args...))
	}
	guard := newDownGuard(len(names))
	for i, f := range sched.Faults {
		wg.Go(func() {
			if err := sleep(ctx, time.Until(d.Start.Add(f.Start))); err != nil {
				return
			}
			rec := &recs[i]
			rec.Fault = f
			waited, err := guard.acquire(ctx, f)
			if err != nil {
				return
			}
			if waited {
				rec.Notes = append(rec.Notes, "held back until a node outside it was up")
			}
			err = t.inject(ctx, f, rec, func() {
				rec.Held = heldBy(obs, t.vips(), f, names)
				cfgs := t.configs()
				rec.Bound = bound(f, cfgs, names, t.vips())
				rec.Advert = longestAdvert(cfgs)
				late := ""
				if l := time.Since(d.Start.Add(f.Start)); l > 100*time.Millisecond {
					late = fmt.Sprintf(" (%s late: its nodes were busy)", l.Round(time.Millisecond))
				}
				say("#%d %s: began%s; its nodes held %v", f.Index, f.Describe(names), late, rec.Held)
			})
			guard.release(f)
			now := time.Now()
			if rec.Began.IsZero() {
				rec.Began = now
			}
			if rec.Ended.IsZero() {
				rec.Ended = now
			}
			if rec.Recovered.IsZero() {
				rec.Recovered = now
			}
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				res.Problems = append(res.Problems, fmt.Sprintf("fault #%d (%s): %v", f.Index, f.Describe(names), err))
				mu.Unlock()
				say("#%d %s: FAILED: %v", f.Index, f.Kind, err)
				return
			}
			say("#%d %s: over after %s, nodes back %s later%s", f.Index, f.Kind, rec.Ended.Sub(rec.Began).Round(time.Millisecond),
				rec.Recovered.Sub(rec.Ended).Round(time.Millisecond), notes(rec.Notes))
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	status := time.NewTicker(StatusEvery)
	timeUp := time.After(time.Until(d.Start.Add(o.Duration)))
	for finished, over := false, false; (!finished || !over) && ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case <-status.C:
			res.Load = loadAverage(res.Load)
			say("%s; load average %.1f", statusLine(prober, obs, t.vips(), d.Start), res.Load[len(res.Load)-1])
		case <-done:
			finished, done = true, nil
		case <-timeUp:
			over, timeUp = true, nil
		}
	}
	status.Stop()
	wg.Wait()
	if ctx.Err() != nil {
		prober.Stop()
		obs.Stop()
		return nil, ctx.Err()
	}
	// Faults that ran late may end after the planned tail: the fleet gets
	// a fault's window after the last recovery (a returning node takes
	// its VIPs back) and the end checks' 2 s of probes.
	var last time.Time
	for _, r := range recs {
		if r.Recovered.After(last) {
			last = r.Recovered
		}
	}
	if wait := time.Until(last.Add(d.Allowance + 2*time.Second)); wait > 0 {
		say("the last fault ended late: %s for the fleet to settle", wait.Round(time.Millisecond))
		if err := sleep(ctx, wait); err != nil {
			prober.Stop()
			obs.Stop()
			return nil, err
		}
	}
	d.Records = recs
	d.End = time.Now()
	res.Load = loadAverage(res.Load)
	probes := prober.Stop()
	controls := probes[len(d.VIPs):]
	d.Probes, d.Controls, d.Controls6 = probes[:len(d.VIPs)], controls[:len(names)], controls[len(names):]
	d.Stalls = prober.Stalls()
	seen := obs.Stop()
	d.Holdings, d.Entries, d.Unannounced = seen.Holdings, seen.Entries, seen.Unannounced
	for _, e := range seen.Errs {
		res.Problems = append(res.Problems, "observing the holders: "+e.Error())
	}
	say("faults over; checking the settled cluster")
	res.Analysis = Analyse(d)
	res.Checks = append(clientChecks(d, 2*time.Second), t.settled(ctx)...)
	say("shutting down %s and checking that nothing is left", t.name())
	res.Checks = append(res.Checks, t.shutdown(ctx)...)
	if err := writeReport(o, t.name(), t.settings(), res); err != nil {
		return res, err
	}
	return res, nil
}

func notes(ns []string) string {
	if len(ns) == 0 {
		return ""
	}
	return "; NOTE: " + strings.Join(ns, "; ")
}

// heldBy lists the VIPs f's nodes held when it began (a rollout's: every
// VIP with a holder).
func heldBy(obs *Observer, vips []netip.Addr, f Fault, names []string) []netip.Addr {
	var held []netip.Addr
	for _, v := range vips {
		if slices.ContainsFunc(obs.Holders(v), func(h string) bool {
			return f.Kind == Rollout || slices.ContainsFunc(f.Nodes, func(i int) bool { return names[i] == h })
		}) {
			held = append(held, v)
		}
	}
	return held
}

// bound is the longest outage f may cause: a graceful handover gets
// GracefulBound; a failed check the check's period, its fall-1 retries and
// the best backup's skew; a dead node (and a node deaf to adverts) the best
// backup's master-down interval, 3 adverts and its skew; both plus
// limitMargin, the worst over the VIPs f's nodes (every node, for the
// segment) could hold.
func bound(f Fault, confs map[string]*keepalived.Conf, names []string, vips []netip.Addr) time.Duration {
	lim := LimitOf(f.Kind)
	if lim == Graceful {
		return GracefulBound
	}
	nodes := f.Nodes
	if len(nodes) == 0 {
		for i := range names {
			nodes = append(nodes, i)
		}
	}
	var worst time.Duration
	for _, v := range vips {
		for _, i := range nodes {
			_, prio, c, err := bench.BestBackup(confs, names[i], v)
			if err != nil {
				continue
			}
			b := c.MasterDown(prio)
			if lim == FailedCheck {
				b = checkFails + c.Skew(prio)
			}
			worst = max(worst, b+limitMargin)
		}
	}
	return worst
}

// checkFails is how long the built-in check takes at most to fail on a
// stopped service: a period and fall-1 retries (the runs keep the default
// period).
const checkFails = config.DefaultPortCheckInterval + (check.Fall-1)*check.Retry

// statusLine is the progress's periodic line: every VIP's availability
// so far and holders now.
func statusLine(p *Prober, obs *Observer, vips []netip.Addr, since time.Time) string {
	var parts []string
	for i, v := range vips {
		ps := p.Since(i, since)
		var down time.Duration
		for _, o := range Outages(ps) {
			down += o.Len()
		}
		avail := 100.0
		if span := time.Since(since); span > 0 {
			avail = 100 * (1 - float64(down)/float64(span))
		}
		parts = append(parts, fmt.Sprintf("%s %.2f%% on %s", v, avail, strings.Join(obs.Holders(v), "+")))
	}
	return "status: " + strings.Join(parts, " | ")
}

// loadAverage appends the machine's 1-minute load average to ls (nothing
// when /proc/loadavg cannot be read).
func loadAverage(ls []float64) []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ls
	}
	var one float64
	if _, err := fmt.Sscan(string(b), &one); err != nil {
		return ls
	}
	return append(ls, one)
}

// clientChecks: at the end, every VIP answered the client's last probes
// (those of the last span), each from its holder, and every node's own
// addresses answered them from that node: controls that do not answer
// would make every holder look silent (see Data.silentSpans).
func clientChecks(d *Data, span time.Duration) []Check {
	var checks []Check
	for vi, v := range d.VIPs {
		holders := HoldersAt(d.Holdings[v], d.End)
		c := answeredCheck(fmt.Sprintf("the client reaches %s at its holder (every probe of the last %s answered by it)", v, span), d.Probes[vi], holders, d.End.Add(-span))
		c.Detail = fmt.Sprintf("holder %v; %s", holders, c.Detail)
		checks = append(checks, c)
	}
	for _, f := range []struct {
		family   string
		controls [][]Probe
	}{{"IPv4", d.Controls}, {"IPv6", d.Controls6}} {
		for n, ps := range f.controls {
			if n < len(d.Nodes) {
				checks = append(checks, answeredCheck(fmt.Sprintf("the client reaches %s at its own %s address (every probe of the last %s answered by it)", d.Nodes[n], f.family, span), ps, d.Nodes[n:n+1], d.End.Add(-span)))
			}
		}
	}
	return checks
}

// answeredCheck: every probe of ps sent from from on was answered by the
// one node of want.
func answeredCheck(name string, ps []Probe, want []string, from time.Time) Check {
	c := Check{Name: name}
	failed, others, n := 0, map[string]int{}, 0
	for _, p := range ps {
		if p.Sent.Before(from) {
			continue
		}
		n++
		switch {
		case !p.OK:
			failed++
		case len(want) != 1 || p.Node != want[0]:
			others[p.Node]++
		}
	}
	c.OK = n > 0 && failed == 0 && len(others) == 0
	c.Detail = fmt.Sprintf("%d probes, %d failed", n, failed)
	if len(others) > 0 {
		c.Detail += fmt.Sprintf(", answered by others %v", others)
	}
	return c
}

// writeReport writes the Markdown report, the pictures and the recording
// (Save) into o.Out.
func writeReport(o Options, target string, settings []string, res *Result) error {
	if o.Out == "" {
		return nil
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	var errs []error
	for i, v := range res.Data.VIPs {
		path := filepath.Join(o.Out, "vip-"+strings.ReplaceAll(v.String(), ":", "_")+".png")
		f, err := os.Create(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, DrawTimeline(f, res.Data, &res.Analysis, i), f.Close())
		res.Pictures = append(res.Pictures, path)
	}
	res.Report = filepath.Join(o.Out, "report.md")
	f, err := os.Create(res.Report)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, WriteMarkdown(f, o, target, settings, res), f.Close())
	errs = append(errs, save(filepath.Join(o.Out, recordingName), recording{Options: o, Target: target, Settings: settings, Result: res}))
	return errors.Join(errs...)
}
