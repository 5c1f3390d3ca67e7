package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/ipfailover/ipfailover/test/bench"
	"github.com/ipfailover/ipfailover/test/kube"
)

// The cluster's rows of make bench that need the nemesis's faults: a
// holder's node dying, freezing or losing its link, timed as the client
// sees it, and a rolling update between two images and its rollback.
const (
	RowKubeDeath    = "kube: node death: each VIP of the holder answers from another node"
	RowKubeFreeze   = "kube: node freeze: each VIP of the holder answers from another node"
	RowKubeLinkCut  = "kube: link cut: each VIP of the holder answers from another node"
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

// failoverKinds are the faults of the failover rows, by row.
var failoverKinds = []struct {
	kind Kind
	row  string
}{
	{NodeDeath, RowKubeDeath},
	{NodeFreeze, RowKubeFreeze},
	{LinkCut, RowKubeLinkCut},
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
	for round := range b.Rounds {
		for _, k := range failoverKinds {
			fmt.Fprintf(t.o.Progress, "kube bench: %s, round %d of %d\n", k.kind, round+1, b.Rounds)
			failoverLoad = loadAverage(failoverLoad)
			ss, err := t.failover(ctx, k.kind, round)
			failoverLoad = loadAverage(failoverLoad)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.row, err)
			}
			for _, s := range ss {
				add(k.row, s)
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
	for _, name := range order {
		row := bench.TimeRow(name, samples[name], "", "")
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
func (t *kubeTarget) failover(ctx context.Context, kind Kind, round int) ([]bench.Sample, error) {
	hm, err := t.c.Holders(ctx, labVIPs, kubeSettled)
	if err != nil {
		return nil, err
	}
	// The nodes in turn, each while it holds a VIP.
	node := round % len(t.c.Nodes)
	victim := t.c.Nodes[node].Lab()
	if !hm.Holds(victim) {
		victim = hm[labVIPs[round%len(labVIPs)]]
		node = slices.IndexFunc(t.c.Nodes, func(m *kube.Machine) bool { return m.Lab() == victim })
		if node < 0 {
			return nil, fmt.Errorf("%s is held by no node of the cluster", labVIPs[round%len(labVIPs)])
		}
	}
	name := t.c.Nodes[node].Name
	if err := t.readConfigs(ctx); err != nil {
		return nil, err
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
			return nil, err
		}
		held = append(held, i)
		limits = append(limits, conf.MasterDown(prio))
	}
	dial, closeDialer, err := t.dialer()
	if err != nil {
		return nil, err
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
		return nil, err
	}
	rec := &Record{}
	if err := t.inject(ctx, Fault{Kind: kind, Nodes: []int{node}, Length: failoverHold}, rec, func() {}); err != nil {
		return nil, fmt.Errorf("%s of %s: %w", kind, name, err)
	}
	if _, err := t.c.Holders(ctx, labVIPs, kubeSettled); err != nil {
		return nil, err
	}
	all, stopped := p.Stop(), true
	stalls := p.Stalls()
	var out []bench.Sample
	for j, i := range held {
		at, ok := answeredElsewhere(all[i], rec.Began, name)
		if !ok {
			return nil, fmt.Errorf("%s of %s: %s never answered from another node", kind, name, labVIPs[i])
		}
		took := at.Sub(rec.Began)
		// A stall of the client up to the answer may have delayed the
		// probe that saw it: said, not taken off.
		if st := total(stalls, rec.Began, at); st > 0 {
			fmt.Fprintf(t.o.Progress, "kube bench: %s of %s: the client stalled %s of the %s to %s's answer\n", kind, name, st.Round(time.Millisecond), took.Round(time.Millisecond), labVIPs[i])
		}
		out = append(out, bench.Sample{Value: took, Limit: limits[j]})
		t.log.Info("failover", "fault", kind, "node", name, "vip", labVIPs[i], "took", took.Round(time.Millisecond), "limit", limits[j])
		fmt.Fprintf(t.o.Progress, "kube bench: %s of %s at %s: %s answered from another node after %s (limit %s)\n", kind, name,
			rec.Began.UTC().Format("15:04:05.000"), labVIPs[i], took.Round(time.Millisecond), limits[j])
	}
	return out, nil
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
