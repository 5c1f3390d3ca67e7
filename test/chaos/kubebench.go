package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/internal/splitbrain"
	"github.com/ipfailover/ipfailover/test/bench"
	"github.com/ipfailover/ipfailover/test/kube"
)

// The cluster's rows of make bench that need the nemesis's faults: a
// holder's node dying, freezing or losing its link, timed as the client
// sees it, and a rolling update between two images and its rollback.
const (
	RowKubeDeath   = "kube: node death: each VIP of the holder answers from another node"
	RowKubeFreeze  = "kube: node freeze: each VIP of the holder answers from another node"
	RowKubeLinkCut = "kube: link cut: each VIP of the holder answers from another node"
	// rowTakeover is the takeover time the taking nodes measured of the
	// same faults (%s: the fault).
	rowTakeover     = "kube: %s: the taking node's own takeover time, ipfailover_takeover_seconds{cause=\"silent\",stage=\"announced\"}"
	rowUpgradeGap   = "kube: rolling update %s → this image: longest outage per VIP"
	rowUpgradeTwice = "kube: rolling update %s → this image: longest time on two nodes per VIP"
	rowRollbackGap  = "kube: rollback (rollout undo) → %s: longest outage per VIP"
	rowRollbackTwc  = "kube: rollback (rollout undo) → %s: longest time on two nodes per VIP"
	rowPinGap       = "kube: rolling update pinning OPENSHIFT_HA_ADVERT_INTERVAL=" + pinnedInterval + ": longest outage per VIP"
	rowPinTwice     = "kube: rolling update pinning OPENSHIFT_HA_ADVERT_INTERVAL=" + pinnedInterval + ": longest time on two nodes per VIP"
	rowUnpinGap     = "kube: rolling update removing the pin: longest outage per VIP"
	rowUnpinTwice   = "kube: rolling update removing the pin: longest time on two nodes per VIP"
	// pinnedInterval is what the pinning rollout sets: pods at it and at
	// the fast interval speak VRRPv3 and hear each other.
	pinnedInterval = "0.5"
)

// Targets of the rows: every VIP of a dead, frozen or cut off holder
// answers elsewhere within a second; during an update between images no
// VIP is on two nodes longer than a second.
const (
	failoverTarget = 1.0
	twiceTarget    = 1.0
	// failoverHold is how long a node stays dead, frozen or cut off: past
	// the slowest master-down interval of the fleet (1 s adverts) with
	// room, so that the VIP has moved before the node comes back.
	failoverHold = 5 * time.Second
	// kubeSettled is how long the holders must stay put to count as
	// settled: a node back takes its preferred VIPs again a master-down
	// interval after its keepalived starts.
	kubeSettled = 4 * time.Second
)

// failoverKind is a fault of the failover rows: the client's row and the
// taking nodes' own.
type failoverKind struct {
	kind     Kind
	row      string
	takeover string
}

// failoverKinds are the faults of the failover rows, by row.
var failoverKinds = []failoverKind{
	{NodeDeath, RowKubeDeath, fmt.Sprintf(rowTakeover, "node death")},
	{NodeFreeze, RowKubeFreeze, fmt.Sprintf(rowTakeover, "node freeze")},
	{LinkCut, RowKubeLinkCut, fmt.Sprintf(rowTakeover, "link cut")},
}

// KubeBench says which cluster rows to measure.
type KubeBench struct {
	// Rounds is how many times each failover fault hits a holder (0: no
	// failover rows).
	Rounds int
	// UpgradeFrom is the image the rolling update starts from and the
	// rollback returns to ("": no update rows); it must be among
	// o.MoreImages.
	UpgradeFrom string
	// UpgradeRounds is how many updates and rollbacks are measured.
	UpgradeRounds int
	// PinRounds is how many times a rolling update pins the advert
	// interval and another removes the pin (0: no pin rows).
	PinRounds int
}

// KubeBenchRows brings a cluster up as a kube run does (o.Target "kube":
// deploy/overlays/kubernetes at its defaults, peers from the pods, the
// run's VIPs and checked service), measures b's rows with the client
// probing every VIP, and removes the cluster. The pods' logs go to
// o.Out/logs.
func KubeBenchRows(ctx context.Context, o Options, b KubeBench) ([]bench.Row, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if b.UpgradeFrom != "" && !slices.Contains(o.MoreImages, b.UpgradeFrom) {
		o.MoreImages = append(o.MoreImages, b.UpgradeFrom)
	}
	t, err := newKubeTarget(ctx, o)
	if err != nil {
		return nil, err
	}
	defer t.close()
	if err := t.start(ctx); err != nil {
		return nil, err
	}
	samples := map[string][]bench.Sample{}
	var order []string
	add := func(row string, s bench.Sample) {
		if _, ok := samples[row]; !ok {
			order = append(order, row)
		}
		samples[row] = append(samples[row], s)
	}
	// The machine's load during each group of rows goes into their notes:
	// a starved client or node lengthens what the rows see.
	var failoverLoad, upgradeLoad []float64
	// The takeover histograms' new buckets of each failover row's
	// faults, added up: the quantiles Prometheus would give.
	tookBuckets := map[string]map[float64]uint64{}
	for round := range b.Rounds {
		for _, k := range failoverKinds {
			fmt.Fprintf(t.o.Progress, "kube bench: %s, round %d of %d\n", k.kind, round+1, b.Rounds)
			failoverLoad = loadAverage(failoverLoad)
			ss, took, err := t.failover(ctx, k.kind, round)
			failoverLoad = loadAverage(failoverLoad)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.row, err)
			}
			for _, s := range ss {
				add(k.row, s)
			}
			for _, s := range took.samples {
				add(k.takeover, s)
			}
			if tookBuckets[k.takeover] == nil {
				tookBuckets[k.takeover] = map[float64]uint64{}
			}
			for le, n := range took.buckets {
				tookBuckets[k.takeover][le] += n
			}
		}
	}
	for round := range b.PinRounds {
		for _, step := range []struct {
			change     string
			gap, twice string
		}{
			{"OPENSHIFT_HA_ADVERT_INTERVAL=" + pinnedInterval, rowPinGap, rowPinTwice},
			{"OPENSHIFT_HA_ADVERT_INTERVAL-", rowUnpinGap, rowUnpinTwice},
		} {
			fmt.Fprintf(t.o.Progress, "kube bench: kubectl set env %s, round %d of %d\n", step.change, round+1, b.PinRounds)
			upgradeLoad = loadAverage(upgradeLoad)
			gaps, twice, err := t.upgrade(ctx, func() error {
				_, err := t.c.Kubectl(ctx, "-n", kube.Namespace, "set", "env", deployment, step.change)
				return err
			})
			upgradeLoad = loadAverage(upgradeLoad)
			if err != nil {
				return nil, fmt.Errorf("kubectl set env %s: %w", step.change, err)
			}
			for i := range gaps {
				add(step.gap, bench.Sample{Value: gaps[i]})
				add(step.twice, bench.Sample{Value: twice[i]})
			}
		}
	}
	if b.UpgradeFrom != "" {
		if err := t.toImage(ctx, b.UpgradeFrom); err != nil {
			return nil, err
		}
		for round := range max(b.UpgradeRounds, 1) {
			fmt.Fprintf(t.o.Progress, "kube bench: rolling update from %s, round %d\n", b.UpgradeFrom, round+1)
			upgradeLoad = loadAverage(upgradeLoad)
			gaps, twice, err := t.upgrade(ctx, func() error { return t.c.Apply(ctx, t.overlay()) })
			if err != nil {
				return nil, fmt.Errorf("rolling update from %s: %w", b.UpgradeFrom, err)
			}
			for i := range gaps {
				add(fmt.Sprintf(rowUpgradeGap, b.UpgradeFrom), bench.Sample{Value: gaps[i]})
				add(fmt.Sprintf(rowUpgradeTwice, b.UpgradeFrom), bench.Sample{Value: twice[i]})
			}
			fmt.Fprintf(t.o.Progress, "kube bench: rollback to %s, round %d\n", b.UpgradeFrom, round+1)
			gaps, twice, err = t.upgrade(ctx, func() error {
				_, err := t.c.Kubectl(ctx, "-n", kube.Namespace, "rollout", "undo", deployment)
				return err
			})
			upgradeLoad = loadAverage(upgradeLoad)
			if err != nil {
				return nil, fmt.Errorf("rollback to %s: %w", b.UpgradeFrom, err)
			}
			for i := range gaps {
				add(fmt.Sprintf(rowRollbackGap, b.UpgradeFrom), bench.Sample{Value: gaps[i]})
				add(fmt.Sprintf(rowRollbackTwc, b.UpgradeFrom), bench.Sample{Value: twice[i]})
			}
		}
	}
	var rows []bench.Row
	medians := map[string]float64{}
	for _, name := range order {
		row := bench.TimeRow(name, samples[name], "", "")
		medians[name] = row.Median
		if i := slices.IndexFunc(failoverKinds, func(k failoverKind) bool { return k.takeover == name }); i >= 0 {
			client := medians[failoverKinds[i].row]
			row.Note = fmt.Sprintf("per VIP group another node took, as its histogram counts it: each node's new observations of a fault (the sum and count scraped from :9650 before the fault and after the holders settled), from the last advert it heard from the master to its first gratuitous ARP or unsolicited NA; the median of the histograms' buckets, as histogram_quantile(0.5) gives it, %.3f s; the client's median of the same faults (the row %q) %.3f s, %.0f ms apart, the target 100 ms: the fault lands up to one advert interval after the master's last advert, so the node's figure is the longer by half an interval on average",
				histogramQuantile(0.5, tookBuckets[name]), failoverKinds[i].row, client, 1000*math.Abs(row.Median-client))
			// The target is on the difference of the medians.
			pass := row.N > 0 && math.Abs(row.Median-client) <= 0.1
			row.Target, row.TargetOn, row.Pass = 0.1, "median", &pass
			rows = append(rows, row)
			continue
		}
		switch name {
		case RowKubeDeath, RowKubeFreeze, RowKubeLinkCut:
			row.LimitRule = "3 × advert_int + the best backup's skew"
			row.Note = fmt.Sprintf("per VIP the holder had, from the fault (at a random moment of the advert interval) to the first answer from another node, by a client probing every VIP every %s (HTTP to the checked service, which answers with its node's name); the node back after %s", ProbeInterval, failoverHold)
			row.Check("worst", failoverTarget)
			row.Note += loadNote(failoverLoad)
		case fmt.Sprintf(rowUpgradeGap, b.UpgradeFrom), fmt.Sprintf(rowRollbackGap, b.UpgradeFrom):
			row.Note = fmt.Sprintf("kubectl apply of the overlay with the image changed, or kubectl rollout undo; a client probing every VIP every %s, until the rollout is over and the holders settled; less the client's own stalls, as make chaos counts them", ProbeInterval) + loadNote(upgradeLoad)
		case rowPinGap, rowUnpinGap:
			row.Note = fmt.Sprintf("kubectl set env deployment/ipfailover, at the manifests' defaults; a client probing every VIP every %s, until the rollout is over and the holders settled; less the client's own stalls, as make chaos counts them", ProbeInterval) + loadNote(upgradeLoad)
			row.Check("worst", twiceTarget)
		default:
			row.Note = "by netlink dumps of every node every 5 ms, over the whole update until the holders settled" + loadNote(upgradeLoad)
			row.Check("worst", twiceTarget)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// loadNote gives the range of the machine's 1-minute load averages ls.
func loadNote(ls []float64) string {
	if len(ls) == 0 {
		return ""
	}
	return fmt.Sprintf("; the machine's 1-minute load average %.1f–%.1f (%d cores, shared)", slices.Min(ls), slices.Max(ls), runtime.NumCPU())
}

// failover hits a holder (round picks which: the nodes in turn) with kind, at a
// random moment of the advert interval, while the client probes every
// VIP, and returns, per VIP the holder had, the time from the fault to the
// first probe another node answered, with the best backup's master-down
// interval as its limit. The node is back and the holders settled when
// it returns.
func (t *kubeTarget) failover(ctx context.Context, kind Kind, round int) ([]bench.Sample, nodeTakeovers, error) {
	var none nodeTakeovers
	hm, err := t.c.Holders(ctx, labVIPs, kubeSettled)
	if err != nil {
		return nil, none, err
	}
	// The nodes in turn, each while it holds a VIP.
	node := round % len(t.c.Nodes)
	victim := t.c.Nodes[node].Lab()
	if !hm.Holds(victim) {
		victim = hm[labVIPs[round%len(labVIPs)]]
		node = slices.IndexFunc(t.c.Nodes, func(m *kube.Machine) bool { return m.Lab() == victim })
		if node < 0 {
			return nil, none, fmt.Errorf("%s is held by no node of the cluster", labVIPs[round%len(labVIPs)])
		}
	}
	name := t.c.Nodes[node].Name
	if err := t.readConfigs(ctx); err != nil {
		return nil, none, err
	}
	confs := t.configs()
	var held []int
	var limits []time.Duration
	for i, v := range labVIPs {
		if hm[v] != victim {
			continue
		}
		_, prio, conf, err := bench.BestBackup(confs, name, v)
		if err != nil {
			return nil, none, err
		}
		held = append(held, i)
		limits = append(limits, conf.MasterDown(prio))
	}
	dial, closeDialer, err := t.dialer()
	if err != nil {
		return nil, none, err
	}
	defer closeDialer()
	var targets []netip.AddrPort
	for _, v := range labVIPs {
		targets = append(targets, netip.AddrPortFrom(v, ServicePort))
	}
	p := StartProber(ctx, dial, targets, ProbeInterval, ProbeDeadline)
	stopped := false
	defer func() {
		if !stopped {
			p.Stop()
		}
	}()
	// A second of answers first, then a random moment of the advert
	// interval: the fault lands anywhere between two adverts.
	if err := sleep(ctx, time.Second+rand.N(advertOf(t.o.AdvertInterval))); err != nil {
		return nil, none, err
	}
	// The takeover histograms of the nodes that may take the VIPs, before
	// the fault and once the holders settled after it.
	var others []*kube.Machine
	for i, m := range t.c.Nodes {
		if i != node {
			others = append(others, m)
		}
	}
	before, err := t.takeoverHistograms(ctx, others)
	if err != nil {
		return nil, none, err
	}
	rec := &Record{}
	if err := t.inject(ctx, Fault{Kind: kind, Nodes: []int{node}, Length: failoverHold}, rec, func() {}); err != nil {
		return nil, none, fmt.Errorf("%s of %s: %w", kind, name, err)
	}
	if _, err := t.c.Holders(ctx, labVIPs, kubeSettled); err != nil {
		return nil, none, err
	}
	after, err := t.takeoverHistograms(ctx, others)
	if err != nil {
		return nil, none, err
	}
	took := newTakeovers(before, after)
	if len(took.samples) == 0 {
		return nil, none, fmt.Errorf("%s of %s: no other node's ipfailover_takeover_seconds{cause=%q,stage=%q} counted a takeover; the nodes counted instead: %s", kind, name, splitbrain.CauseSilent, "announced", countedInstead(before, after))
	}
	all, stopped := p.Stop(), true
	stalls := p.Stalls()
	var out []bench.Sample
	for j, i := range held {
		at, ok := answeredElsewhere(all[i], rec.Began, name)
		if !ok {
			return nil, none, fmt.Errorf("%s of %s: %s never answered from another node", kind, name, labVIPs[i])
		}
		elapsed := at.Sub(rec.Began)
		// A stall of the client up to the answer may have delayed the
		// probe that saw it: said, not taken off.
		if st := total(stalls, rec.Began, at); st > 0 {
			fmt.Fprintf(t.o.Progress, "kube bench: %s of %s: the client stalled %s of the %s to %s's answer\n", kind, name, st.Round(time.Millisecond), elapsed.Round(time.Millisecond), labVIPs[i])
		}
		out = append(out, bench.Sample{Value: elapsed, Limit: limits[j]})
		t.log.Info("failover", "fault", kind, "node", name, "vip", labVIPs[i], "took", elapsed.Round(time.Millisecond), "limit", limits[j])
		fmt.Fprintf(t.o.Progress, "kube bench: %s of %s at %s: %s answered from another node after %s (limit %s)\n", kind, name,
			rec.Began.UTC().Format("15:04:05.000"), labVIPs[i], elapsed.Round(time.Millisecond), limits[j])
	}
	for _, s := range took.samples {
		fmt.Fprintf(t.o.Progress, "kube bench: %s of %s: a node measured a takeover of %s\n", kind, name, s.Value.Round(time.Millisecond))
	}
	return out, took, nil
}

// takeoverHistogram is one node's ipfailover_takeover_seconds of silent
// masters, at the announced stage.
type takeoverHistogram struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
	// taken is the node's ipfailover_vip_moves_total{direction="taken"}
	// and timed its ipfailover_takeover_seconds_count, by cause and
	// stage ("cause/stage"): what a fault that counted no silent takeover
	// counted instead.
	taken map[string]float64
	timed map[string]uint64
}

// takeoverHistograms scrapes ms' takeover histograms, by node name.
func (t *kubeTarget) takeoverHistograms(ctx context.Context, ms []*kube.Machine) (map[string]takeoverHistogram, error) {
	out := map[string]takeoverHistogram{}
	for _, m := range ms {
		s, err := t.c.Metrics(ctx, m.Lab())
		if err != nil {
			return nil, err
		}
		h := takeoverHistogram{taken: map[string]float64{}, timed: map[string]uint64{}}
		h.count, h.sum, h.buckets = s.Histogram("ipfailover_takeover_seconds", map[string]string{"cause": splitbrain.CauseSilent, "stage": "announced"})
		for _, cause := range []string{splitbrain.CauseStart, splitbrain.CauseHandover, splitbrain.CauseSilent, splitbrain.CausePreemption} {
			h.taken[cause] = s.Sum("ipfailover_vip_moves_total", map[string]string{"cause": cause, "direction": "taken"})
			for _, stage := range []string{"master", "announced"} {
				h.timed[cause+"/"+stage], _, _ = s.Histogram("ipfailover_takeover_seconds", map[string]string{"cause": cause, "stage": stage})
			}
		}
		out[m.Name] = h
	}
	return out, nil
}

// nodeTakeovers are the takeovers the nodes counted during one fault: a
// sample per observation, each node's new ones at their mean (a histogram
// keeps only their sum), and the buckets' new counts.
type nodeTakeovers struct {
	samples []bench.Sample
	buckets map[float64]uint64
}

// newTakeovers is what the histograms after counted that those before did
// not. A node whose count fell (its pod restarted) counts from zero.
func newTakeovers(before, after map[string]takeoverHistogram) nodeTakeovers {
	took := nodeTakeovers{buckets: map[float64]uint64{}}
	for node, a := range after {
		b := before[node]
		if a.count < b.count {
			b = takeoverHistogram{}
		}
		n := a.count - b.count
		if n == 0 {
			continue
		}
		mean := time.Duration((a.sum - b.sum) / float64(n) * float64(time.Second))
		for range n {
			took.samples = append(took.samples, bench.Sample{Value: mean})
		}
		for le, c := range a.buckets {
			took.buckets[le] += c - b.buckets[le]
		}
	}
	return took
}

// countedInstead says what moves and takeover times each node counted
// between before and after, by cause (and stage).
func countedInstead(before, after map[string]takeoverHistogram) string {
	var out []string
	for _, node := range slices.Sorted(maps.Keys(after)) {
		a, b := after[node], before[node]
		var counted []string
		for _, c := range slices.Sorted(maps.Keys(a.taken)) {
			if d := a.taken[c] - b.taken[c]; d != 0 {
				counted = append(counted, fmt.Sprintf("moves taken %s +%g", c, d))
			}
		}
		for _, c := range slices.Sorted(maps.Keys(a.timed)) {
			if d := int64(a.timed[c]) - int64(b.timed[c]); d != 0 {
				counted = append(counted, fmt.Sprintf("takeovers timed %s %+d", c, d))
			}
		}
		if len(counted) == 0 {
			counted = []string{"nothing"}
		}
		out = append(out, node+": "+strings.Join(counted, ", "))
	}
	return strings.Join(out, "; ")
}

// histogramQuantile is the q-quantile of cumulative bucket counts by upper
// bound, interpolated within its bucket as Prometheus's
// histogram_quantile does (NaN: no observations).
func histogramQuantile(q float64, buckets map[float64]uint64) float64 {
	les := slices.Sorted(maps.Keys(buckets))
	if len(les) == 0 || buckets[les[len(les)-1]] == 0 {
		return math.NaN()
	}
	rank := q * float64(buckets[les[len(les)-1]])
	lower, below := 0.0, uint64(0)
	for _, le := range les {
		if n := buckets[le]; float64(n) >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			return lower + (le-lower)*(rank-float64(below))/float64(n-below)
		}
		lower, below = le, buckets[le]
	}
	return lower
}

// answeredElsewhere is when the VIP answered from a node other than node
// after since: the first such probe's answer less the round trip of the
// last answer before it (Outages' end of an outage), not before the probe
// was sent.
func answeredElsewhere(ps []Probe, since time.Time, node string) (time.Time, bool) {
	var rtt time.Duration
	for _, p := range ps {
		if p.OK && p.Sent.Before(since) {
			rtt = p.Done.Sub(p.Sent)
		}
		if p.OK && !p.Sent.Before(since) && p.Node != node {
			at := p.Done.Add(-rtt)
			if at.Before(p.Sent) {
				at = p.Sent
			}
			return at, true
		}
	}
	return time.Time{}, false
}

// toImage rolls the Deployment out to image, unmeasured, and waits for the
// holders to settle.
func (t *kubeTarget) toImage(ctx context.Context, image string) error {
	o := t.overlay()
	o.Image = image
	if err := t.c.Apply(ctx, o); err != nil {
		return err
	}
	return t.rolledOut(ctx)
}

// rolledOut waits for the Deployment's rollout, a Ready pod on every node
// and the holders to settle.
func (t *kubeTarget) rolledOut(ctx context.Context) error {
	if err := t.c.RolloutStatus(ctx, deployment); err != nil {
		return err
	}
	if _, err := t.readyPods(ctx); err != nil {
		return err
	}
	_, err := t.c.Holders(ctx, labVIPs, kubeSettled)
	return err
}

// upgrade runs change (a rollout of the Deployment to other pods) while
// the client probes every VIP and every node's addresses are dumped, and
// returns per VIP the longest outage (less the client's own stalls) and
// the longest time on two nodes, until the rollout is over and the
// holders settled.
func (t *kubeTarget) upgrade(ctx context.Context, change func() error) (gaps, twice []time.Duration, err error) {
	dial, closeDialer, err := t.dialer()
	if err != nil {
		return nil, nil, err
	}
	defer closeDialer()
	var targets []netip.AddrPort
	for _, v := range labVIPs {
		targets = append(targets, netip.AddrPortFrom(v, ServicePort))
	}
	p := StartProber(ctx, dial, targets, ProbeInterval, ProbeDeadline)
	m := t.c.Lab().MeterSplits(labVIPs, 5*time.Millisecond, nil)
	if err := sleep(ctx, time.Second); err != nil {
		p.Stop()
		m.Stop()
		return nil, nil, err
	}
	err = change()
	if err == nil {
		err = t.rolledOut(ctx)
	}
	if err == nil {
		// The last holder change's outage ends on probes after it.
		err = sleep(ctx, time.Second)
	}
	all := p.Stop()
	_, longest := m.Stop()
	if err != nil {
		return nil, nil, err
	}
	stalls := p.Stalls()
	for i, v := range labVIPs {
		// As the chaos report counts them: the client's own stalls
		// within an outage are not the VIP's.
		var worst time.Duration
		for _, o := range Outages(all[i]) {
			o.Stalled = total(stalls, o.Start, o.End)
			worst = max(worst, o.Len()-o.Stalled)
			if o.Len()-o.Stalled >= 100*time.Millisecond {
				fmt.Fprintf(t.o.Progress, "kube bench: %s: outage from %s for %s, %d probes failed (%s), the client stalled %s of it\n", v,
					o.Start.UTC().Format("15:04:05.000"), o.Len().Round(time.Millisecond), o.Failed, o.Reason, o.Stalled.Round(time.Millisecond))
			}
		}
		if len(all[i]) == 0 {
			return nil, nil, errors.New("no probe was sent")
		}
		gaps = append(gaps, worst)
		twice = append(twice, longest[v])
		fmt.Fprintf(t.o.Progress, "kube bench: %s: longest outage %s, longest on two nodes %s\n", v, worst.Round(time.Millisecond), longest[v].Round(time.Millisecond))
	}
	return gaps, twice, nil
}
