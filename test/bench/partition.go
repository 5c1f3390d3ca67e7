package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/shipped"
)

// The healed-partition rows: a client in its own namespace connects over
// TCP to every VIP every 10 ms while one node's VRRP is cut in the network
// both ways for 6 s and then healed, one direction more than an advert
// interval before the other, each way in turn; the nodes do not route, so
// a client still sending to the node that gave a VIP up reaches nothing.
// The same partitions run on ipfailover and on keepalived configured the
// way the shipped image's generator writes it.
const (
	rowPartition        = "healed partition, nodes not routing: longest client outage"
	rowPartitionShipped = rowPartition + ", shipped image's keepalived.conf"
	// partitionFor is how long the cut lasts.
	partitionFor = 6 * time.Second
	// partitionWatch is how long after the heal a VIP may take to answer
	// again before the row counts it as still stranded.
	partitionWatch = 8 * time.Second
	// partitionSteady is how long every VIP must answer without a break
	// for the watch to end early.
	partitionSteady = 2 * time.Second
	// clientEvery and clientDeadline are the client's connection attempts.
	clientEvery    = 10 * time.Millisecond
	clientDeadline = 100 * time.Millisecond
	// targetPartition is the bound on the worst outage.
	targetPartition = 1.0
)

// partitions measures the client's outages after healed partitions, of
// ipfailover and of the shipped configuration, Rounds partitions each.
func (r *runner) partitions(ctx context.Context) error {
	vips := VIPs(smallVIPs)
	if out, err := r.c.Client.Exec(ctx, "ip", "route", "replace", vipPrefix(vips).String(), "dev", lab.Link); err != nil {
		return fmt.Errorf("routing the VIPs in the client: %w: %s", err, out)
	}
	// What the client connects to: a TCP service on every address of
	// every node, so whichever node has a VIP answers for it.
	var services []*lab.Service
	defer func() {
		for _, s := range services {
			s.Stop()
		}
	}()
	for _, n := range r.c.Nodes {
		s, err := lab.ListenIn(n.Netns, fmt.Sprintf("0.0.0.0:%d", ProbePort))
		if err != nil {
			return err
		}
		services = append(services, s)
	}
	for _, kind := range []string{rowPartition, rowPartitionShipped} {
		if err := r.partitionFleet(ctx, vips, kind); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	return nil
}

// partitionFleet starts a fleet (ipfailover, or keepalived with the
// shipped configuration), partitions it Rounds times and adds one sample
// per partition to row: the longest any VIP went unanswered after the heal.
func (r *runner) partitionFleet(ctx context.Context, vips []netip.Addr, row string) error {
	var procs []*lab.Process
	if row == rowPartition {
		f, err := r.start(ctx, Env(), vips, "")
		if err != nil {
			return err
		}
		defer r.stop(f)
		procs = f.procs
	} else {
		var err error
		if procs, err = r.startShipped(ctx, vips); err != nil {
			return err
		}
		defer func() {
			r.stop(&fleet{procs: procs})
		}()
	}
	targets := make([]netip.AddrPort, len(vips))
	for i, v := range vips {
		targets[i] = netip.AddrPortFrom(v, ProbePort)
	}
	probe, err := r.c.ProbeTCP(targets, clientEvery, clientDeadline)
	if err != nil {
		return err
	}
	defer probe.Stop()
	for round := range r.o.Rounds {
		// A client that a previous partition left stranded starts over:
		// its neighbour entries go, the holders answer its requests.
		if out, err := r.c.Client.Exec(ctx, "ip", "neigh", "flush", "dev", lab.Link); err != nil {
			return fmt.Errorf("flushing the client's neighbours: %w: %s", err, out)
		}
		wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
		st, err := r.w.WaitSettled(wctx, r.o.Poll, settle(Env()), vips, func() error { return exited(procs) }, func(Snapshot, string) {})
		if err == nil {
			err = probe.WaitSteady(wctx, partitionSteady, convergeTimeout)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("before partition %d: %w", round+1, err)
		}
		victim := st.At.Holder(vips[round%len(vips)])
		first, second := lab.ToNode, lab.FromNode
		if round%2 == 1 {
			first, second = second, first
		}
		gap := time.Second + rand.N(500*time.Millisecond)
		if err := randomPhase(ctx, time.Second); err != nil {
			return err
		}
		if err := victim.CutVRRP(ctx, lab.BothWays); err != nil {
			return err
		}
		if err := sleep(ctx, partitionFor); err != nil {
			return err
		}
		healed := time.Now()
		if err := victim.HealVRRP(ctx, first); err != nil {
			return err
		}
		if err := sleep(ctx, gap); err != nil {
			return err
		}
		if err := victim.HealVRRP(ctx, second); err != nil {
			return err
		}
		// Until every VIP answers steadily, or the watch ends.
		wctx, cancel = context.WithTimeout(ctx, partitionWatch-gap)
		steady := probe.WaitSteady(wctx, partitionSteady, partitionWatch) == nil
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		// One sample per partition: the VIP the client waited for longest.
		var longest time.Duration
		stranded := false
		for i, v := range vips {
			out := probe.Outage(i, healed)
			_, ok := probe.Reachable(i)
			longest = max(longest, out)
			stranded = stranded || !ok
			r.o.Log.Info(row, "partition", round+1, "node", victim.Name, "healed_first", first.String(), "gap", gap.Round(time.Millisecond),
				"vip", v, "outage", out.Round(time.Millisecond), "answering_at_the_end", ok, "steady", steady)
		}
		r.add(row, Sample{Value: longest})
		if stranded {
			r.noteStranded(row)
		}
	}
	return nil
}

// noteStranded counts a partition after which some VIP did not answer when
// the watch ended.
func (r *runner) noteStranded(row string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stranded[row]++
}

// startShipped runs keepalived on every node with the configuration the
// shipped image's generator writes for it (the random part of its
// priorities drawn as the image does) and waits for one holder per VIP.
func (r *runner) startShipped(ctx context.Context, vips []netip.Addr) ([]*lab.Process, error) {
	if err := r.reset(ctx, vips); err != nil {
		return nil, err
	}
	var procs []*lab.Process
	for _, n := range r.c.Nodes {
		conf := shipped.Conf(shipped.Options{VIPs: vips, Node: n.Addr4, MonitorPort: MonitorPort, ReplicaCount: 3,
			Random: func(int) int { return rand.IntN(32) }})
		p, err := n.StartKeepalived(ctx, conf, r.prefixed(n, ""))
		if err != nil {
			r.stop(&fleet{procs: procs})
			return nil, err
		}
		procs = append(procs, p)
	}
	wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	if _, err := r.w.WaitSettled(wctx, r.o.Poll, settle(Env()), vips, func() error { return exited(procs) }, func(Snapshot, string) {}); err != nil {
		r.stop(&fleet{procs: procs})
		return nil, fmt.Errorf("waiting for one holder per VIP: %w", err)
	}
	return procs, nil
}

func exited(procs []*lab.Process) error {
	for _, p := range procs {
		if p.Exited() {
			return fmt.Errorf("%s on %s exited", p.Argv[0], p.Node().Name)
		}
	}
	return nil
}

// partitionRows are the row of ipfailover, with the shipped
// configuration's figures of the same run beside it, and the shipped
// configuration's own row.
func (r *runner) partitionRows() []Row {
	ours, theirs := r.samples[rowPartition], r.samples[rowPartitionShipped]
	if len(ours)+len(theirs) == 0 {
		return nil
	}
	shippedRow := TimeRow(rowPartitionShipped, theirs, "", "")
	shippedRow.Note = fmt.Sprintf("keepalived with the shipped image's generated keepalived.conf on every node, the same partitions; after %d of %d partitions a VIP was still unanswered when the %v watch ended (counted to then)",
		r.stranded[rowPartitionShipped], len(theirs), partitionWatch)
	shippedFigure := ""
	if len(theirs) > 0 {
		shippedFigure = fmt.Sprintf("%.3f s median, %.3f s worst, same run", shippedRow.Median, shippedRow.Worst)
	}
	row := TimeRow(rowPartition, ours, "", shippedFigure)
	row.Note = fmt.Sprintf("a client connects over TCP to every VIP every %v (attempts failed unless connected within %v); one node's VRRP cut both ways in the bridge for %v, healed one direction 1-1.5 s before the other, each way in turn; one sample per partition, the VIP unanswered longest after the heal; %d partitions left a VIP unanswered at the end of the %v watch",
		clientEvery, clientDeadline, partitionFor, r.stranded[rowPartition], partitionWatch)
	row.Check("worst", targetPartition)
	return []Row{row, shippedRow}
}
