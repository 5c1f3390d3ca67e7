// Package bench measures what users of ipfailover feel: how fast VIPs move
// on a graceful stop, a failed check and a node crash, how fast a cluster
// first converges, how long a rollout leaves each VIP unanswered, how fast the entrypoint starts keepalived, what a
// Prometheus scrape costs, what a flood of its metrics port costs a holder, how much memory the entrypoint takes, what VRRP
// adverts cost a node at each interval, and how it scales to 254 VIPs and
// to ten nodes of 1,016 VIPs. It runs the real binary in a lab cluster of
// network namespaces and times VIP moves by dumping every node's addresses
// over netlink, so the figures are the kernel's, not a log's.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/check"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

// Options shape a run.
type Options struct {
	// Binary is the ipfailover binary. It must not live under /tmp, /run
	// or /etc/keepalived: the nodes mount their own tmpfs there.
	Binary string
	// Rounds is how many times each failover is measured.
	Rounds int
	// Scale adds the 254-VIP rows.
	Scale bool
	// ScrapeFor is how long the scrapers run.
	ScrapeFor time.Duration
	// Poll is the interval between netlink dumps (5 ms).
	Poll time.Duration
	// Log gets one line per step; nil discards.
	Log *slog.Logger
	// NodeOut gets every node's output, prefixed; nil discards.
	NodeOut io.Writer
	// Phases limits the run to some of "startup", "failover", "rollout",
	// "migrate", "partition", "scrape", "flood", "cpu", "adverts", "scale",
	// "scale10" (Scale still gates these two, and the 254-instance CPU and
	// adverts rows), "image" and "kube"; empty runs all.
	Phases []string
	// CPUFor is how long each CPU row measures a fleet at rest.
	CPUFor time.Duration
	// CostFor is how long the adverts and scale10 rows count a settled
	// fleet's VRRP packets and CPU.
	CostFor time.Duration
	// NodeEnv is added to every node's environment (GOGC=50, say, to try
	// a change without rebuilding).
	NodeEnv []string
	// Image is the image whose size the "image" phase reports (make
	// image's tag; empty: no image rows), and that the "kube" phase runs.
	Image string
	// KubeBin holds the Kubernetes binaries of the "kube" phase (make
	// kube-bins).
	KubeBin string
	// Flooder is the program the "flood" phase runs on a node as
	// `Flooder flood -url ...` (Flood): test/cmd/bench itself. Like
	// Binary, it must not live under /tmp.
	Flooder string
	// FloodFor is how long the flood goes on before the failover.
	FloodFor time.Duration
	// FloodBaseline, when set, is another ipfailover binary (outside /tmp)
	// flooded in the same run, round by round in turn with Binary, for
	// comparison; its rows carry ", baseline binary".
	FloodBaseline string
}

func (o Options) phase(name string) bool {
	return len(o.Phases) == 0 || slices.Contains(o.Phases, name)
}

// Settings of the three-node runs.
const (
	MonitorPort = 8080
	Scrapers    = 4
	configPath  = "/etc/keepalived/keepalived.conf"
	comm        = "ipfailover"
	// moveTimeout bounds the wait for one VIP move.
	moveTimeout = 20 * time.Second
	// convergeTimeout bounds the wait for a fleet to converge.
	convergeTimeout = 60 * time.Second
	// checkMoves is how many failed-check moves of the built-in check
	// each round measures (each on a fresh fleet).
	checkMoves = 2
	// scriptInterval is the shipped image's check interval, at which the
	// keepalived script rows run.
	scriptInterval = "2"
	// nodeAddr in a node's environment is replaced by the node's IPv4
	// address.
	nodeAddr = "{node}"
)

// The shipped image's figures, measured on the same kind of cluster.
const (
	shippedGraceful  = "0.86–0.89 s"
	shippedCheck     = "1.7–1.9 s"
	shippedCrash     = "2.1–2.3 s"
	shippedConverge  = "4.2 s"
	shippedStartup   = "~65 ms"
	shippedRSS       = "18.8 MB (bash 3.4 + exporter 15.4)"
	shippedScrape    = "104 ms"
	scaleVIPs        = "198.51.100.1-254"
	smallVIPs        = "198.51.100.1-3"
	targetGraceful   = 0.1
	targetCheck      = 0.300
	targetCheckWorst = 0.500
	targetStartup    = 0.065
	targetScrape     = 0.010
	targetRSS        = 18.8
	crashBoundMargin = 100 * time.Millisecond
)

// Env is the environment of the three-VIP runs: three VIPs, one preferred
// per node (REPLICA_COUNT 3), the default TCP check on MonitorPort.
func Env(extra ...string) []string {
	return append([]string{
		"OPENSHIFT_HA_VIRTUAL_IPS=" + smallVIPs,
		"OPENSHIFT_HA_REPLICA_COUNT=3",
		fmt.Sprintf("OPENSHIFT_HA_MONITOR_PORT=%d", MonitorPort),
	}, extra...)
}

// ScaleEnv is the environment of the scale rows: 254 VIPs in 254
// instances, router ids 1..254.
func ScaleEnv() []string {
	return []string{
		"OPENSHIFT_HA_VIRTUAL_IPS=" + scaleVIPs,
		"OPENSHIFT_HA_VRRP_ID_OFFSET=0",
		"OPENSHIFT_HA_REPLICA_COUNT=3",
		fmt.Sprintf("OPENSHIFT_HA_MONITOR_PORT=%d", MonitorPort),
	}
}

// VIPs expands "a.b.c.x-y".
func VIPs(spec string) []netip.Addr {
	first, last, _ := strings.Cut(spec, "-")
	a := netip.MustParseAddr(first)
	b4 := a.As4()
	end := int(b4[3])
	if last != "" {
		n, err := strconv.Atoi(last)
		if err != nil {
			panic(fmt.Sprintf("bench.VIPs(%q): %v", spec, err))
		}
		end = n
	}
	var out []netip.Addr
	for i := int(b4[3]); i <= end; i++ {
		b4[3] = byte(i)
		out = append(out, netip.AddrFrom4(b4))
	}
	return out
}

// Run builds a cluster, measures every row and removes the cluster again,
// also when ctx is cancelled.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Rounds < 1 {
		o.Rounds = 1
	}
	if o.Poll <= 0 {
		o.Poll = 5 * time.Millisecond
	}
	if o.ScrapeFor <= 0 {
		o.ScrapeFor = 3 * time.Second
	}
	if o.CPUFor <= 0 {
		o.CPUFor = 10 * time.Second
	}
	if o.CostFor <= 0 {
		o.CostFor = 20 * time.Second
	}
	if o.FloodFor <= 0 {
		o.FloodFor = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	began := time.Now()
	c, err := lab.New(ctx, lab.Options{Nodes: 3})
	if err != nil {
		return nil, err
	}
	r := &runner{o: o, c: c, svc: map[*lab.Node]*lab.Service{}, crashed: map[*lab.Node]bool{}, samples: map[string][]Sample{}, sizes: map[string][]int64{}, cpu: map[string][]cpuSample{}, rest: map[string][]restSample{}, failed: map[string]string{}, stranded: map[string]int{}, floodRounds: map[string][]floodRound{}}
	defer r.close()
	if r.script, err = writeCheckScript(filepath.Dir(o.Binary)); err != nil {
		return nil, err
	}
	if r.w, err = NewWatcher(c.Nodes); err != nil {
		return nil, err
	}
	if err := r.services(); err != nil {
		return nil, err
	}

	if fi, err := os.Stat(o.Binary); err == nil {
		r.addSize(rowBinary, fi.Size())
	}
	rep := &Report{Rounds: o.Rounds, PollInterval: o.Poll.Seconds()}
	err = r.measure(ctx)
	rep.Rows = r.rows()
	if o.Image != "" && o.phase("image") && ctx.Err() == nil {
		o.Log.Info("image", "image", o.Image)
		size, ierr := MeasureImage(ctx, o.Image)
		rep.Rows = append(rep.Rows, imageRows(o.Image, size, ierr)...)
	}
	rep.Notes = r.notes
	rep.Resolution = r.resolution.Seconds()
	rep.Elapsed = time.Since(began).Seconds()
	return rep, err
}

type runner struct {
	o       Options
	c       *lab.Cluster
	w       *Watcher
	svc     map[*lab.Node]*lab.Service
	crashed map[*lab.Node]bool
	// script is the shipped image's TCP check as a script file.
	script string

	mu         sync.Mutex
	resolution time.Duration
	samples    map[string][]Sample
	sizes      map[string][]int64
	cpu        map[string][]cpuSample
	// rest are the adverts and scale10 rows' nodes at rest, by CPU row.
	rest map[string][]restSample
	// failed says, by row, why an adverts or scale10 case has no figures.
	failed map[string]string
	// stranded counts, per partition row, the VIPs still unanswered when
	// the watch after a heal ended.
	stranded map[string]int
	startRes time.Duration
	notes    []string
	// floodRounds are the flood rounds' figures beyond the samples, by
	// row suffix.
	floodRounds map[string][]floodRound
}

// Sample keys, also the row names.
const (
	rowGraceful    = "graceful handover (SIGTERM)"
	rowCheck       = "failed-check move"
	rowCheckScript = "failed-check move, keepalived script check every 2 s"
	rowCrash       = "crash move"
	rowCrashFast   = "crash move at advert_int 0.1"
	rowConverge    = "first convergence, 3 VIPs"
	rowConvFast    = "first convergence at advert_int 0.1"
	splitSuffix    = ": VIP on 2 nodes at once"
	rowConfig      = "startup: exec → config written"
	rowKeepalived  = "startup: exec → keepalived running"
	rowScrape      = "scrape GET /metrics, 3 VIPs"
	rowBinary      = "entrypoint binary size"
	rowRSSRest     = "entrypoint RSS at rest"
	rowRSSScrape   = "entrypoint RSS under scraping"
	rowScrapeSize  = "scrape size, 3 VIPs"
	rowRender      = "scale: render 254 instances"
	rowScaleConv   = "scale: convergence, 254 VIPs"
	rowScaleScrape = "scale: scrape GET /metrics"
	rowScaleSize   = "scale: scrape size"
	rowScaleRSS    = "scale: entrypoint RSS at rest"
	rowScaleRSSPk  = "scale: entrypoint RSS under scraping"
)

func (r *runner) close() {
	for _, s := range r.svc {
		s.Stop()
	}
	if r.w != nil {
		r.w.Close()
	}
	if err := r.c.Close(); err != nil {
		r.note("removing the cluster: %v", err)
	}
}

func (r *runner) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.o.Log.Warn(fmt.Sprintf(format, args...))
}

func (r *runner) add(row string, s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[row] = append(r.samples[row], s)
}

func (r *runner) addSize(row string, b int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes[row] = append(r.sizes[row], b)
}

func (r *runner) sawResolution(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resolution = max(r.resolution, d)
}

// services makes sure every node's monitored service listens.
func (r *runner) services() error {
	for _, n := range r.c.Nodes {
		if s := r.svc[n]; s != nil {
			continue
		}
		s, err := lab.ListenIn(n.Netns, netip.AddrPortFrom(n.Addr4, MonitorPort).String())
		if err != nil {
			return err
		}
		r.svc[n] = s
	}
	return nil
}

func (r *runner) measure(ctx context.Context) error {
	small := VIPs(smallVIPs)
	for round := range r.o.Rounds {
		r.o.Log.Info("round", "round", round+1, "of", r.o.Rounds)
		if r.o.phase("startup") {
			if err := r.startup(ctx); err != nil {
				return fmt.Errorf("startup: %w", err)
			}
		}
		if !r.o.phase("failover") {
			continue
		}
		vip := small[round%len(small)]
		if err := r.graceful(ctx, small, vip); err != nil {
			return fmt.Errorf("graceful handover: %w", err)
		}
		for i := range checkMoves {
			if err := r.failedCheck(ctx, Env(), small, small[(round*checkMoves+i)%len(small)], rowCheck); err != nil {
				return fmt.Errorf("failed-check move: %w", err)
			}
		}
		if err := r.failedCheck(ctx, Env(r.scriptCheck()...), small, vip, rowCheckScript); err != nil {
			return fmt.Errorf("failed-check move with a script: %w", err)
		}
		if err := r.crash(ctx, Env(), small, vip, rowConverge, rowCrash); err != nil {
			return fmt.Errorf("crash move: %w", err)
		}
		if err := r.crash(ctx, Env("OPENSHIFT_HA_ADVERT_INTERVAL=0.1"), small, vip, rowConvFast, rowCrashFast); err != nil {
			return fmt.Errorf("crash move at advert_int 0.1: %w", err)
		}
	}
	if r.o.phase("rollout") {
		for round := range r.o.Rounds {
			r.o.Log.Info("rollout round", "round", round+1, "of", r.o.Rounds)
			for _, rolling := range []bool{true, false} {
				if err := r.rollout(ctx, small, rolling); err != nil {
					return fmt.Errorf("rollout: %w", err)
				}
			}
		}
	}
	if r.o.phase("migrate") {
		for round := range min(r.o.Rounds, 3) {
			r.o.Log.Info("migration round", "round", round+1)
			for _, m := range []struct {
				from       migrateFrom
				bridge     bool
				gap, twice string
			}{
				{fromIPFailover, true, rowMigrateGap, rowMigrateTwice},
				{fromIPFailover, false, rowMigrateGapPlain, rowMigrateTwiceP},
				{fromShipped, true, rowMigrateShipGap, rowMigrateShipTwo},
			} {
				if err := r.migrate(ctx, small, m.from, m.bridge, m.gap, m.twice); err != nil {
					return fmt.Errorf("migration: %w", err)
				}
			}
		}
	}
	if r.o.phase("partition") {
		if err := r.partitions(ctx); err != nil {
			return fmt.Errorf("healed partitions: %w", err)
		}
	}
	if r.o.phase("scrape") {
		if err := r.scrape(ctx, small); err != nil {
			return fmt.Errorf("scrape: %w", err)
		}
	}
	if r.o.phase("flood") {
		if err := r.floods(ctx); err != nil {
			return fmt.Errorf("flood: %w", err)
		}
	}
	if r.o.phase("cpu") {
		if err := r.cpuAtRest(ctx); err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
	}
	if r.o.phase("adverts") {
		if err := r.adverts(ctx); err != nil {
			return fmt.Errorf("adverts: %w", err)
		}
	}
	if r.o.Scale && r.o.phase("scale") {
		if err := r.scale(ctx); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
	}
	if r.o.Scale && r.o.phase("scale10") {
		if err := r.scale10(ctx); err != nil {
			return fmt.Errorf("scale10: %w", err)
		}
	}
	if r.o.phase("kube") {
		if err := r.kube(ctx); err != nil {
			return fmt.Errorf("kube: %w", err)
		}
	}
	return nil
}

// fleet is ipfailover running on every node.
type fleet struct {
	procs []*lab.Process
	outs  []*lab.Output
	// confs is each node's keepalived.conf, by node name.
	confs map[string]*keepalived.Conf
	// at is the converged state.
	at Snapshot
}

func (f *fleet) proc(n *lab.Node) *lab.Process {
	for _, p := range f.procs {
		if p.Node() == n {
			return p
		}
	}
	return nil
}

// start cleans the nodes up, starts ipfailover on every node and waits for
// one holder per VIP; the time that takes is a convergence sample of row
// (none for "").
func (r *runner) start(ctx context.Context, env []string, vips []netip.Addr, row string) (*fleet, error) {
	return r.startBinary(ctx, r.o.Binary, env, vips, row)
}

// startBinary is start with another ipfailover binary.
func (r *runner) startBinary(ctx context.Context, binary string, env []string, vips []netip.Addr, row string) (*fleet, error) {
	if err := r.reset(ctx, vips); err != nil {
		return nil, err
	}
	f := &fleet{confs: map[string]*keepalived.Conf{}}
	argv := []string{binary, "run"}
	env = append(slices.Clone(env), r.o.NodeEnv...)
	wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	// keepalived's instances enter BACKUP once the track script first
	// passes: their master-down timers start then, and so does the VRRP
	// limit of a convergence. The line's arrival time marks it.
	outs := make([]*linePrefixer, len(r.c.Nodes))
	began := time.Now()
	for i, n := range r.c.Nodes {
		outs[i] = r.prefixed(n, "Entering BACKUP STATE")
		out := lab.NewOutput(outs[i])
		p, err := n.Start(ctx, argv, forNode(env, n), out)
		if err != nil {
			r.stop(f)
			return nil, err
		}
		f.procs = append(f.procs, p)
		f.outs = append(f.outs, out)
	}
	st, err := r.w.WaitSettled(wctx, r.o.Poll, settle(env), vips, func() error {
		for i, p := range f.procs {
			if p.Exited() {
				code, _ := p.Wait(context.Background())
				return fmt.Errorf("ipfailover on %s exited %d:\n%s", p.Node().Name, code, tail(f.outs[i].String(), 20))
			}
		}
		return nil
	}, func(s Snapshot, key string) {
		if len(vips) <= 3 {
			r.o.Log.Debug("holders", "after", s.At.Sub(began).Round(time.Millisecond), "holders", key)
			return
		}
		var one, none, split int
		for _, v := range vips {
			switch len(s.Holders(v)) {
			case 0:
				none++
			case 1:
				one++
			default:
				split++
			}
		}
		r.o.Log.Debug("holders", "after", s.At.Sub(began).Round(time.Millisecond), "one_holder", one, "none", none, "several", split)
	})
	if err != nil {
		r.stop(f)
		return nil, fmt.Errorf("waiting for one holder per VIP: %w", err)
	}
	f.at = st.At
	for _, p := range f.procs {
		b, err := p.ReadFile(configPath)
		if err != nil {
			r.stop(f)
			return nil, fmt.Errorf("reading %s of %s: %w", configPath, p.Node().Name, err)
		}
		c, err := keepalived.Parse(b)
		if err != nil {
			r.stop(f)
			return nil, fmt.Errorf("%s: %w", p.Node().Name, err)
		}
		f.confs[p.Node().Name] = c
	}
	if row != "" {
		// The VRRP limit of a first convergence: instances start as
		// backups, so the top node of each VIP takes it one master-down
		// interval after its instances started.
		var limit time.Duration
		for _, v := range vips {
			top, prio := topNode(f.confs, v)
			from := began
			if i := slices.IndexFunc(r.c.Nodes, func(n *lab.Node) bool { return n.Name == top }); !outs[i].marked().IsZero() {
				from = outs[i].marked()
			}
			limit = max(limit, from.Sub(began)+f.confs[top].MasterDown(prio))
		}
		r.add(row, Sample{Value: st.At.At.Sub(began), Limit: limit})
		r.add(row+splitSuffix, Sample{Value: st.Split})
	}
	return f, nil
}

// settle is how long a fleet's holders must stay put to count as
// converged: more than one advert interval, so that a node that became
// master together with a better one has heard it and stepped down.
func settle(env []string) time.Duration {
	adv := time.Second
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "OPENSHIFT_HA_ADVERT_INTERVAL="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
				adv = time.Duration(f * float64(time.Second))
			}
		}
	}
	return max(500*time.Millisecond, adv+adv/2)
}

// topNode is the node with the highest priority for vip.
func topNode(confs map[string]*keepalived.Conf, vip netip.Addr) (string, int) {
	node, prio := "", -1
	for name, c := range confs {
		if in := c.InstanceOf(vip); in != nil && (in.Priority > prio || in.Priority == prio && name > node) {
			node, prio = name, in.Priority
		}
	}
	return node, prio
}

// stop kills the fleet (SIGKILL ends each node's PID namespace).
func (r *runner) stop(f *fleet) {
	for _, p := range f.procs {
		_ = p.Kill()
	}
	for _, p := range f.procs {
		<-p.Done()
	}
}

// reset brings crashed nodes back, restarts stopped services and removes
// VIPs a killed fleet left on the nodes.
func (r *runner) reset(ctx context.Context, vips []netip.Addr) error {
	for n := range r.crashed {
		if err := n.Rejoin(ctx); err != nil {
			return err
		}
		delete(r.crashed, n)
	}
	if err := r.services(); err != nil {
		return err
	}
	return r.w.Release(vips)
}

// prefixed is n's output, noting when a line containing mark arrived ("": none).
func (r *runner) prefixed(n *lab.Node, mark string) *linePrefixer {
	w := r.o.NodeOut
	if w == nil {
		w = io.Discard
	}
	return newLinePrefixer(w, n.Name+": ", mark)
}

// move times the move of the VIPs that holder holds to other nodes from
// t0, one sample per VIP, and checks each went to the best backup.
func (r *runner) move(ctx context.Context, f *fleet, holder *lab.Node, t0 time.Time, row string, limit func(c *keepalived.Conf, prio int) time.Duration) error {
	var moving []netip.Addr
	lims := map[netip.Addr]time.Duration{}
	want := map[netip.Addr]string{}
	for _, in := range f.confs[holder.Name].Instances {
		for _, v := range in.VIPs {
			if f.at.Holder(v) != holder {
				continue
			}
			node, prio, c, err := BestBackup(f.confs, holder.Name, v)
			if err != nil {
				return err
			}
			moving = append(moving, v)
			lims[v] = limit(c, prio)
			want[v] = node
		}
	}
	if len(moving) == 0 {
		return fmt.Errorf("%s holds none of its VIPs", holder.Name)
	}
	seen := map[netip.Addr]Snapshot{}
	// The uncertainty of a move's time is the gap between the last dump
	// that did not show it and the first that did (t0 for the first dump).
	last := t0
	var gap time.Duration
	wctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	_, _, err := r.w.Wait(wctx, r.o.Poll, func(s Snapshot) bool {
		for _, v := range moving {
			if _, ok := seen[v]; !ok && s.Holder(v, holder) != nil {
				seen[v] = s
				gap = max(gap, s.At.Sub(last))
				r.sawResolution(s.At.Sub(last))
			}
		}
		last = s.At
		return len(seen) == len(moving)
	})
	if err != nil {
		return fmt.Errorf("%s: waiting for %v to leave %s: %w", row, moving, holder.Name, err)
	}
	var elsewhere []string
	for _, v := range moving {
		s := seen[v]
		r.add(row, Sample{Value: s.At.Sub(t0), Limit: lims[v]})
		if got := s.Holder(v, holder); got.Name != want[v] {
			elsewhere = append(elsewhere, fmt.Sprintf("%s went to %s, not to the best backup %s", v, got.Name, want[v]))
		}
		r.o.Log.Info(row, "vip", v, "from", holder.Name, "to", s.Holder(v, holder).Name, "took", s.At.Sub(t0).Round(time.Microsecond), "limit", lims[v], "resolution", gap.Round(time.Microsecond))
	}
	// One note per move, however many VIPs it moved.
	switch {
	case len(elsewhere) == 1:
		r.note("%s: %s", row, elsewhere[0])
	case len(elsewhere) > 1:
		r.note("%s: %d of %d VIPs went to another node than the best backup, first %s", row, len(elsewhere), len(moving), elsewhere[0])
	}
	return nil
}

func (r *runner) graceful(ctx context.Context, vips []netip.Addr, vip netip.Addr) error {
	f, err := r.start(ctx, Env(), vips, rowConverge)
	if err != nil {
		return err
	}
	defer r.stop(f)
	holder := f.at.Holder(vip)
	p := f.proc(holder)
	t0 := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := r.move(ctx, f, holder, t0, rowGraceful, func(c *keepalived.Conf, prio int) time.Duration { return c.Skew(prio) }); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	code, err := p.Wait(wctx)
	if err != nil {
		return err
	}
	if code != 0 {
		r.note("graceful stop of ipfailover on %s exited %d", holder.Name, code)
	}
	return nil
}

// failedCheck stops the service on the holder of vip and times the move
// of its VIPs, with env's check: the built-in one, or a script keepalived
// runs.
func (r *runner) failedCheck(ctx context.Context, env []string, vips []netip.Addr, vip netip.Addr, row string) error {
	f, err := r.start(ctx, env, vips, rowConverge)
	if err != nil {
		return err
	}
	defer r.stop(f)
	holder := f.at.Holder(vip)
	env = append(slices.Clone(env), r.o.NodeEnv...)
	// A service fails at any moment of the check's period: act at a
	// random phase, not at a fixed delay after the start.
	if err := randomPhase(ctx, checkPeriod(f.confs[holder.Name], env)); err != nil {
		return err
	}
	svc := r.svc[holder]
	delete(r.svc, holder)
	t0 := time.Now()
	svc.Stop()
	return r.move(ctx, f, holder, t0, row, func(c *keepalived.Conf, prio int) time.Duration {
		return checkBound(c, env) + c.Skew(prio)
	})
}

// checkPeriod is the period of c's check: the vrrp_script's interval, or
// the built-in check's OPENSHIFT_HA_CHECK_INTERVAL.
func checkPeriod(c *keepalived.Conf, env []string) time.Duration {
	if c.CheckFile == "" {
		return c.CheckInterval
	}
	period := config.DefaultPortCheckInterval
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "OPENSHIFT_HA_CHECK_INTERVAL="); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
				period = time.Duration(f * float64(time.Second))
			}
		}
	}
	return period
}

// checkBound is the longest a check takes to notice a stopped service:
// a script's interval; a period of the built-in check and Fall-1 probes
// Retry apart.
func checkBound(c *keepalived.Conf, env []string) time.Duration {
	if c.CheckFile == "" {
		return c.CheckInterval
	}
	return checkPeriod(c, env) + (check.Fall-1)*check.Retry
}

// scriptCheck is the environment of the shipped image's check: bash's
// /dev/tcp to the node's address, run by keepalived every 2 s.
func (r *runner) scriptCheck() []string {
	return []string{
		fmt.Sprintf("OPENSHIFT_HA_CHECK_SCRIPT=%s %s %d", r.script, nodeAddr, MonitorPort),
		"OPENSHIFT_HA_CHECK_INTERVAL=" + scriptInterval,
	}
}

// writeCheckScript writes the shipped image's check, `bash -c
// '</dev/tcp/ADDR/PORT'`, as a script of two arguments into dir, where the
// nodes see it.
func writeCheckScript(dir string) (string, error) {
	path := filepath.Join(dir, "tcp-check")
	err := os.WriteFile(path, []byte("#!/bin/bash\n# The shipped image's check: connect to ADDR:PORT ($1 $2) and close.\n</dev/tcp/\"$1\"/\"$2\"\n"), 0o755)
	if err != nil {
		return "", fmt.Errorf("writing the check script: %w", err)
	}
	return path, nil
}

// forNode is env with nodeAddr replaced by n's address.
func forNode(env []string, n *lab.Node) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = strings.ReplaceAll(kv, nodeAddr, n.Addr4.String())
	}
	return out
}

func (r *runner) crash(ctx context.Context, env []string, vips []netip.Addr, vip netip.Addr, convRow, row string) error {
	f, err := r.start(ctx, env, vips, convRow)
	if err != nil {
		return err
	}
	defer r.stop(f)
	holder := f.at.Holder(vip)
	// A node dies at any moment of the advert period.
	if err := randomPhase(ctx, f.confs[holder.Name].AdvertInt); err != nil {
		return err
	}
	r.crashed[holder] = true
	t0 := time.Now()
	if err := holder.Crash(); err != nil {
		return err
	}
	took := time.Since(t0)
	if took > 50*time.Millisecond {
		r.note("%s: Node.Crash took %s (counted in the move)", row, took.Round(time.Millisecond))
	}
	return r.move(ctx, f, holder, t0, row, func(c *keepalived.Conf, prio int) time.Duration { return c.MasterDown(prio) })
}

// startup starts ipfailover alone on each node in turn and polls /proc
// for the steps of its start.
func (r *runner) startup(ctx context.Context) error {
	if err := r.reset(ctx, VIPs(smallVIPs)); err != nil {
		return err
	}
	for _, n := range r.c.Nodes {
		p, err := n.Start(ctx, []string{r.o.Binary, "run"}, append(Env(), r.o.NodeEnv...), r.prefixed(n, ""))
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := WatchStartup(wctx, p.Pid, comm, configPath, 200*time.Microsecond)
		cancel()
		_ = p.Kill()
		<-p.Done()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		r.add(rowConfig, Sample{Value: st.Config.Sub(st.Exec)})
		r.add(rowKeepalived, Sample{Value: st.Keepalived.Sub(st.Exec)})
		r.mu.Lock()
		r.startRes = max(r.startRes, st.Resolution)
		r.mu.Unlock()
	}
	return r.w.Release(VIPs(smallVIPs))
}

// scrape measures /metrics on node1 with concurrent scrapers, and the
// entrypoint's memory at rest and while scraped.
func (r *runner) scrape(ctx context.Context, vips []netip.Addr) error {
	f, err := r.start(ctx, Env(), vips, "")
	if err != nil {
		return err
	}
	defer r.stop(f)
	return r.scrapeFleet(ctx, f, rowScrape, rowScrapeSize, rowRSSRest, rowRSSScrape, r.o.ScrapeFor)
}

func (r *runner) scrapeFleet(ctx context.Context, f *fleet, rowLat, rowSize, rowRest, rowScraped string, d time.Duration) error {
	// Rest: let the start settle (backups hear their first adverts, the
	// check runs), then read each entrypoint's RSS.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	for _, p := range f.procs {
		m, err := Memory(p.Pid)
		if err != nil {
			return err
		}
		r.addSize(rowRest, m["VmRSS"])
		r.o.Log.Info("entrypoint memory at rest", "node", p.Node().Name, "rss_kb", m["VmRSS"]>>10, "anon_kb", m["RssAnon"]>>10, "file_kb", m["RssFile"]>>10)
	}
	target := f.procs[0]
	url := fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(target.Node().Addr4, 9650))
	if _, err := r.c.Get(ctx, url); err != nil {
		return fmt.Errorf("first scrape: %w", err)
	}
	var peak int64
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for sctx.Err() == nil {
			if rss, err := RSS(target.Pid); err == nil {
				peak = max(peak, rss)
			}
			_ = sleep(sctx, 20*time.Millisecond)
		}
	})
	res := Scrape(ctx, r.c.Client.Dial, url, Scrapers, d)
	stopSampling()
	wg.Wait()
	if len(res.Latencies) == 0 {
		return fmt.Errorf("no successful scrape of %s (%d errors, first: %v)", url, res.Errors, res.FirstError)
	}
	if res.Errors > 0 {
		r.note("%s: %d of %d scrapes failed, first: %v", rowLat, res.Errors, res.Errors+len(res.Latencies), res.FirstError)
	}
	for _, l := range res.Latencies {
		r.add(rowLat, Sample{Value: l})
	}
	r.addSize(rowSize, int64(res.Bytes))
	if rowScraped != "" {
		r.addSize(rowScraped, peak)
	}
	m, _ := Memory(target.Pid)
	// keepalived's JSON dump stays in the node's /tmp: in a pod, a memory
	// volume charged to the pod.
	var dump int64
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", target.Pid, keepalived.DumpPath())); err == nil {
		dump = fi.Size()
	}
	r.o.Log.Info("scraped", "url", url, "requests", len(res.Latencies), "p50", Median(res.Latencies), "bytes", res.Bytes, "rss_peak_kb", peak>>10, "after_anon_kb", m["RssAnon"]>>10, "after_file_kb", m["RssFile"]>>10, "dump_kb", dump>>10)
	return nil
}

// scale renders and runs 254 instances.
func (r *runner) scale(ctx context.Context) error {
	env := ScaleEnv()
	vips := VIPs(scaleVIPs)
	n := r.c.Nodes[0]
	for range 3 {
		cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+n.Netns, "--", r.o.Binary, "render")
		cmd.Env = append(slices.Concat(env, r.o.NodeEnv), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
		t0 := time.Now()
		out, err := cmd.Output()
		took := time.Since(t0)
		if err != nil {
			return fmt.Errorf("ipfailover render: %w", err)
		}
		if got := strings.Count(string(out), "vrrp_instance "); got != len(vips) {
			return fmt.Errorf("ipfailover render: %d instances, want %d", got, len(vips))
		}
		r.add(rowRender, Sample{Value: took})
	}
	// Two convergences when the run has rounds to spare: one start of 762
	// instances on a shared machine is a noisy sample. The last fleet stays
	// for the scrape.
	var f *fleet
	for i := range min(r.o.Rounds, 2) {
		if f != nil {
			r.stop(f)
		}
		var err error
		if f, err = r.start(ctx, env, vips, rowScaleConv); err != nil {
			return err
		}
		per := map[string]int{}
		for _, v := range vips {
			per[f.at.Holder(v).Name]++
		}
		r.o.Log.Info("scale converged", "start", i+1, "holders", fmt.Sprint(per))
		if i == 0 {
			r.note("scale: VIPs per node %v (the shipped rule: node .11 prefers n%%3=0, .12 every n, .13 even n)", per)
		}
	}
	defer r.stop(f)
	return r.scrapeFleet(ctx, f, rowScaleScrape, rowScaleSize, rowScaleRSS, rowScaleRSSPk, r.o.ScrapeFor/2)
}

// randomPhase sleeps a random time in [0, period).
func randomPhase(ctx context.Context, period time.Duration) error {
	if period <= 0 {
		return nil
	}
	return sleep(ctx, rand.N(period))
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// linePrefixer writes whole lines with the time and a prefix, and notes
// when the first line containing mark arrived.
type linePrefixer struct {
	io.Writer
	mu     sync.Mutex
	markAt time.Time
}

func newLinePrefixer(w io.Writer, prefix, mark string) *linePrefixer {
	l := &linePrefixer{}
	l.Writer = lab.LineWriter(&l.mu, func(line []byte) error {
		// Arrival time in ms: keepalived's own timestamps have seconds.
		now := time.Now()
		if mark != "" && l.markAt.IsZero() && bytes.Contains(line, []byte(mark)) {
			l.markAt = now
		}
		_, err := io.WriteString(w, now.Format("15:04:05.000 ")+prefix+string(line))
		return err
	})
	return l
}

func (l *linePrefixer) marked() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.markAt
}
