package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The scale10 rows: ten lab nodes with static unicast peers, 254 VRRP
// instances of four VIPs each, at the fast advert interval such a fleet
// runs by itself and at the shipped one: how long the fleet takes to
// converge, what a node costs at rest, and how long each VIP of the node
// holding the most is unanswered when that node crashes, as a client sees
// it.
const (
	scale10Nodes = 10
	// scale10VIPs are 1016 VIPs in four /24s; scale10Groups instances of
	// four.
	scale10VIPs   = "198.51.100.1-254,198.51.101.1-254,198.51.102.1-254,198.51.103.1-254"
	scale10Groups = 254
	// scale10Probe is how often the client probes each VIP of the node
	// that crashes, for up to 100 VIPs.
	scale10Probe = 10 * time.Millisecond
)

// scale10Intervals are the advert intervals of the scale10 runs: the fast
// one a fleet of scale10Groups instances runs (0.26 s), and the shipped
// one.
var scale10Intervals = []string{fastInterval(scale10Groups), "1"}

// scale10Names are the rows of one scale10 run.
type scale10Names struct {
	conv, moved, client, cpu, packets string
}

func scale10Rows(interval string) scale10Names {
	at := fmt.Sprintf(", advert_int %s s", interval)
	return scale10Names{
		conv:    "scale10: first convergence, 10 nodes, 1016 VIPs in 254 instances" + at,
		moved:   "scale10: node crash, each of its VIPs on another node (netlink)" + at,
		client:  "scale10: node crash, each of its VIPs answering the client from another node" + at,
		cpu:     "scale10: CPU per node at rest" + at,
		packets: "scale10: VRRP packets per node at rest" + at,
	}
}

// scale10VIPList expands scale10VIPs.
func scale10VIPList() []netip.Addr {
	var out []netip.Addr
	for spec := range strings.SplitSeq(scale10VIPs, ",") {
		out = append(out, VIPs(spec)...)
	}
	return out
}

// scale10 builds a ten-node cluster of its own, runs scale10Run at each
// interval on it and removes it again.
func (r *runner) scale10(ctx context.Context) error {
	began := time.Now()
	c, err := lab.New(ctx, lab.Options{Nodes: scale10Nodes})
	if err != nil {
		return err
	}
	w, err := NewWatcher(c.Nodes)
	if err != nil {
		return errors.Join(err, c.Close())
	}
	// The runner's helpers work on r.c and r.w: the ten-node cluster
	// stands in for the three-node one until the phase ends.
	oldC, oldW, oldSvc, oldCrashed := r.c, r.w, r.svc, r.crashed
	r.c, r.w, r.svc, r.crashed = c, w, map[*lab.Node]*lab.Service{}, map[*lab.Node]bool{}
	defer func() {
		for _, s := range r.svc {
			s.Stop()
		}
		w.Close()
		if err := c.Close(); err != nil {
			r.note("removing the ten-node cluster: %v", err)
		}
		r.c, r.w, r.svc, r.crashed = oldC, oldW, oldSvc, oldCrashed
	}()
	if err := r.services(); err != nil {
		return err
	}
	echoes, err := r.echoes()
	if err != nil {
		return err
	}
	defer func() {
		for _, e := range echoes {
			e.Close()
		}
	}()
	// The VIPs are off the lab's subnet: the client reaches them on its
	// link, by ARP.
	if out, err := c.Client.Exec(ctx, "ip", "route", "replace", "198.51.100.0/22", "dev", lab.Link); err != nil {
		return fmt.Errorf("routing the VIPs in the client: %w: %s", err, out)
	}
	r.o.Log.Info("scale10 cluster ready", "nodes", scale10Nodes, "took", time.Since(began).Round(time.Millisecond))
	// A run that fails (a fleet that never settles on a saturated
	// machine) leaves the other interval's rows, and the bench's later
	// phases, to measure: its rows say why they have no figures.
	for _, adv := range scale10Intervals {
		t := time.Now()
		if err := r.scale10Run(ctx, adv); err != nil {
			if ctx.Err() != nil {
				return err
			}
			r.note("scale10 at advert_int %s: %v", adv, err)
			r.mu.Lock()
			r.failed[scale10Rows(adv).conv] = err.Error()
			r.mu.Unlock()
			continue
		}
		r.o.Log.Info("scale10 run done", "advert_int", adv, "took", time.Since(t).Round(time.Millisecond))
	}
	return nil
}

// scale10Run starts the fleet at one advert interval and waits for one
// holder per VIP (a convergence sample), measures every node at rest,
// then crashes the node holding the most VIPs at a random moment of the
// advert interval while a client probes each of its VIPs every
// scale10Probe. Each of those VIPs is one sample of the netlink row (the
// kernel's view, as the crash rows) and one of the client's row: from the
// crash to the first answered probe after the VIP's outage. The node's
// kernel answers until Crash has cut its link, which is why the first
// answer after the crash is not the one that counts.
func (r *runner) scale10Run(ctx context.Context, adv string) error {
	names := scale10Rows(adv)
	vips := scale10VIPList()
	env := []string{
		"OPENSHIFT_HA_VIRTUAL_IPS=" + scale10VIPs,
		fmt.Sprintf("OPENSHIFT_HA_VIP_GROUPS=%d", scale10Groups),
		"OPENSHIFT_HA_VRRP_ID_OFFSET=0",
		"OPENSHIFT_HA_REPLICA_COUNT=3",
		fmt.Sprintf("OPENSHIFT_HA_MONITOR_PORT=%d", MonitorPort),
		unicastPeers(r.c.Nodes),
		"OPENSHIFT_HA_ADVERT_INTERVAL=" + adv,
	}
	f, err := r.start(ctx, env, vips, names.conv)
	if err != nil {
		return err
	}
	cleanup := func() {}
	defer func() {
		r.stop(f)
		cleanup()
	}()
	per := map[*lab.Node]int{}
	for _, v := range vips {
		per[f.at.Holder(v)]++
	}
	victim := r.c.Nodes[0]
	var spread []string
	for _, n := range r.c.Nodes {
		if per[n] > per[victim] {
			victim = n
		}
		spread = append(spread, fmt.Sprintf("%s=%d", n.Name, per[n]))
	}
	r.o.Log.Info("scale10 converged", "advert_int", adv, "vips_per_node", strings.Join(spread, " "))
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	ss, cleanup, err := r.atRest(ctx, f, r.o.CostFor)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.rest[names.cpu] = ss
	r.mu.Unlock()

	var theirs []netip.Addr
	for _, v := range vips {
		if f.at.Holder(v) == victim {
			theirs = append(theirs, v)
		}
	}
	pc, err := ListenPacketIn(r.c.Client.Netns, ":0")
	if err != nil {
		return err
	}
	targets := make([]netip.AddrPort, len(theirs))
	for i, v := range theirs {
		targets[i] = netip.AddrPortFrom(v, ProbePort)
	}
	// One datagram per VIP per interval: a node holding hundreds of VIPs
	// is probed less often, not with a flood.
	prober := NewProber(pc, targets, max(scale10Probe, time.Duration(len(targets))*100*time.Microsecond))
	prober.Start()
	stopped := false
	defer func() {
		if !stopped {
			prober.Stop(context.Background(), 0)
		}
	}()
	if err := waitAnswered(ctx, prober, time.Now(), 10*time.Second); err != nil {
		return fmt.Errorf("before the crash: %w", err)
	}
	if err := randomPhase(ctx, f.confs[victim.Name].AdvertInt); err != nil {
		return err
	}
	r.crashed[victim] = true
	t0 := time.Now()
	if err := victim.Crash(); err != nil {
		return err
	}
	if took := time.Since(t0); took > 50*time.Millisecond {
		r.note("%s: Node.Crash took %s (counted in the move)", names.client, took.Round(time.Millisecond))
	}
	masterDown := func(c *keepalived.Conf, prio int) time.Duration { return c.MasterDown(prio) }
	if err := r.move(ctx, f, victim, t0, names.moved, masterDown); err != nil {
		return err
	}
	// Where the client sends each VIP's packets once the kernels moved
	// them all: a client that still names the dead node's MAC explains a
	// client's wait longer than the move.
	if mac, err := victim.MAC(); err == nil {
		if neigh, err := r.c.Client.Neighbours(ctx); err == nil {
			stale := 0
			for _, v := range theirs {
				if neigh[v] == mac.String() {
					stale++
				}
			}
			r.o.Log.Info("client's neighbours when every VIP had moved", "vips", len(theirs), "still_the_dead_node", stale, "after", time.Since(t0).Round(time.Millisecond))
			if stale > 0 {
				r.note("%s: when netlink showed every VIP moved (%s after the crash), the client's neighbour entries of %d of the %d VIPs still named the dead node's MAC", names.client, time.Since(t0).Round(time.Millisecond), stale, len(theirs))
			}
		}
	}
	// A VIP the client still sends to the dead node's MAC answers again
	// only once the client's neighbour entry for it fails: that is an
	// outage too, counted up to the end of the watch.
	if err := waitRecovered(ctx, prober, t0, moveTimeout); err != nil {
		if ctx.Err() != nil {
			return err
		}
		r.note("%s: after the crash of %s: %v", names.client, victim.Name, err)
	}
	watched := time.Since(t0)
	prober.Stop(ctx, 100*time.Millisecond)
	stopped = true
	back := prober.Recovered(t0)
	var waits []time.Duration
	for i, v := range theirs {
		_, prio, c, err := BestBackup(f.confs, victim.Name, v)
		if err != nil {
			return err
		}
		wait := watched
		if !back[i].IsZero() {
			wait = back[i].Sub(t0)
		}
		waits = append(waits, wait)
		r.add(names.client, Sample{Value: wait, Limit: masterDown(c, prio)})
	}
	r.o.Log.Info(names.client, "node", victim.Name, "vips", len(theirs), "median", Median(waits).Round(time.Millisecond), "worst", Worst(waits).Round(time.Millisecond))
	return nil
}

// waitRecovered waits until every target of p went unanswered after since
// and answered again.
func waitRecovered(ctx context.Context, p *Prober, since time.Time, within time.Duration) error {
	return waitEvery(ctx, p, func() []time.Time { return p.Recovered(since) }, within, "not answering again within")
}

// waitAnswered waits until every target of p has answered a probe sent at
// or after since.
func waitAnswered(ctx context.Context, p *Prober, since time.Time, within time.Duration) error {
	return waitEvery(ctx, p, func() []time.Time { return p.FirstAnswers(since) }, within, "unanswered after")
}

// waitEvery waits until times has a time for every target of p, every
// 20 ms, at most within.
func waitEvery(ctx context.Context, p *Prober, times func() []time.Time, within time.Duration, what string) error {
	deadline := time.Now().Add(within)
	for {
		ts := times()
		missing := slices.IndexFunc(ts, time.Time.IsZero)
		if missing < 0 {
			return nil
		}
		if time.Now().After(deadline) {
			n := 0
			for _, t := range ts {
				if t.IsZero() {
					n++
				}
			}
			return fmt.Errorf("%d of %d VIPs (%s first) %s %s", n, len(ts), p.targets[missing].Addr(), what, within)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// scale10RowsOf are the rows of the scale10 runs, by interval: the
// convergence against its VRRP limit, the crash of the node holding the
// most VIPs (the kernel's view and the client's, each against 3 ×
// advert_int + the best backup's skew), and a node's cost at rest.
func (r *runner) scale10RowsOf() []Row {
	var rows []Row
	for _, adv := range scale10Intervals {
		names := scale10Rows(adv)
		if why, failed := r.failed[names.conv]; failed {
			rows = append(rows, Row{Name: names.conv, Unit: Seconds, Note: "no figures: " + why})
		}
		if len(r.samples[names.conv]) == 0 {
			continue
		}
		conv := TimeRow(names.conv, r.samples[names.conv], "top node in BACKUP + 3 × advert_int + its skew", "")
		conv.Note = "until every VIP has had the same single holder for 1.5 advert intervals (netlink dumps of the ten nodes)"
		rows = append(rows, conv, TimeRow(names.conv+splitSuffix, r.samples[names.conv+splitSuffix], "", ""))
		if ss := r.samples[names.moved]; len(ss) > 0 {
			moved := TimeRow(names.moved, ss, "3 × advert_int + the best backup's skew", "")
			moved.Note = "the node holding the most VIPs frozen, killed and its link cut at a random moment of the advert interval; one sample per VIP it held, timed by netlink dumps as the crash rows"
			r.crashBound(&moved, ss)
			rows = append(rows, moved)
		}
		if ss := r.samples[names.client]; len(ss) > 0 {
			client := TimeRow(names.client, ss, "3 × advert_int + the best backup's skew", "")
			client.Note = fmt.Sprintf("the same crash; a client probes each of the node's VIPs every %s, or every 0.1 ms × VIPs beyond 100 (UDP echo from whichever node holds it); one sample per VIP: from the crash to the first answered probe after the VIP's longest run of unanswered ones (an answer counts within %s); a VIP not answering again when the %s watch ends counts as the watch", scale10Probe, probeDeadline, moveTimeout)
			r.crashBound(&client, ss)
			rows = append(rows, client)
		}
		if ss, ok := r.rest[names.cpu]; ok {
			cpu := restCPURow(names.cpu, ss, r.o.CostFor)
			if adv == fastInterval(scale10Groups) {
				cpu.Check("worst", targetAdvertCPU)
			}
			rows = append(rows, cpu, restRSSRow(names.cpu, ss), packetRow(names.packets, ss, r.o.CostFor))
		}
	}
	return rows
}
