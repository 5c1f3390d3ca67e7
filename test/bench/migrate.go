package bench

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/shipped"
)

// The migration rows: a multicast fleet (ipfailover, or keepalived with
// the shipped image's configuration) moved node by node to unicast VRRP,
// as a rolling update does, while a client probes every VIP and the nodes'
// addresses are dumped every poll interval.
const (
	rowMigrateGap      = "migration to unicast, bridge: longest gap per VIP"
	rowMigrateTwice    = "migration to unicast, bridge: VIP on 2 nodes, total per VIP"
	rowMigrateGapPlain = "migration to unicast, plain rolling update: longest gap per VIP"
	rowMigrateTwiceP   = "migration to unicast, plain rolling update: VIP on 2 nodes, total per VIP"
	rowMigrateShipGap  = "migration from the shipped image to unicast, bridge: longest gap per VIP"
	rowMigrateShipTwo  = "migration from the shipped image to unicast, bridge: VIP on 2 nodes, total per VIP"
	// The goals over a whole migration.
	targetMigrateGap   = 1.0
	targetMigrateTwice = 1.0
)

// migrateFrom names the fleet a migration starts from.
type migrateFrom int

const (
	fromIPFailover migrateFrom = iota // ipfailover in multicast mode
	fromShipped                       // keepalived with the shipped image's configuration
)

// migrate starts a multicast fleet, then, node by node, stops the node's
// process (SIGTERM) and starts ipfailover with static unicast peers (every
// node's address) and, with bridge, OPENSHIFT_HA_MULTICAST_BRIDGE=true,
// waiting for /readyz before the next node. It samples each VIP's longest
// gap as the client sees it and the total time it sat on two nodes.
func (r *runner) migrate(ctx context.Context, vips []netip.Addr, from migrateFrom, bridge bool, rowGap, rowTwice string) error {
	if err := r.reset(ctx, vips); err != nil {
		return err
	}
	procs := map[*lab.Node]*lab.Process{}
	defer func() {
		for _, p := range procs {
			_ = p.Kill()
			<-p.Done()
		}
	}()
	for _, n := range r.c.Nodes {
		var p *lab.Process
		var err error
		if from == fromShipped {
			conf := shipped.Conf(shipped.Options{VIPs: vips, Node: n.Addr4, MonitorPort: MonitorPort, ReplicaCount: len(r.c.Nodes),
				Random: func(int) int { return rand.N(32) }})
			p, err = n.StartKeepalived(ctx, conf, r.prefixed(n, ""))
		} else {
			p, err = n.Start(ctx, []string{r.o.Binary, "run"}, append(Env(), r.o.NodeEnv...), r.prefixed(n, ""))
		}
		if err != nil {
			return err
		}
		procs[n] = p
	}
	wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	if _, err := r.w.WaitSettled(wctx, r.o.Poll, settle(nil), vips, func() error { return exited(slices.Collect(maps.Values(procs))) }, func(Snapshot, string) {}); err != nil {
		return fmt.Errorf("the multicast fleet: %w", err)
	}

	prober, closeEchoes, err := r.probeVIPs(ctx, vips)
	if err != nil {
		return err
	}
	defer closeEchoes()
	twice := r.c.MeterSplits(vips, r.o.Poll, func(m lab.HolderMap) {
		r.o.Log.Debug("holders", "holders", m.String())
	})
	stopped := false
	defer func() {
		if !stopped {
			prober.Stop(context.Background(), 0)
			twice.Stop()
		}
	}()
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}

	var peers []string
	for _, n := range r.c.Nodes {
		peers = append(peers, n.Addr4.String())
	}
	env := Env("OPENSHIFT_HA_UNICAST_PEERS=" + strings.Join(peers, ","))
	if bridge {
		env = append(env, "OPENSHIFT_HA_MULTICAST_BRIDGE=true")
	}
	began := time.Now()
	for _, n := range r.c.Nodes {
		old := procs[n]
		if err := old.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := old.Wait(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("stopping %s: %w", n.Name, err)
		}
		p, err := n.Start(ctx, []string{r.o.Binary, "run"}, append(env, r.o.NodeEnv...), r.prefixed(n, ""))
		if err != nil {
			return err
		}
		procs[n] = p
		if err := r.waitReady(ctx, n, p); err != nil {
			return err
		}
	}
	took := time.Since(began)
	wctx, cancel = context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	if _, err := r.w.WaitSettled(wctx, r.o.Poll, 2*settle(nil), vips, func() error { return exited(slices.Collect(maps.Values(procs))) }, func(Snapshot, string) {}); err != nil {
		return fmt.Errorf("after the migration: %w", err)
	}
	gaps := prober.Stop(ctx, 100*time.Millisecond)
	split, longest := twice.Stop()
	stopped = true
	for i, v := range vips {
		r.add(rowGap, Sample{Value: gaps[i]})
		r.add(rowTwice, Sample{Value: split[v]})
		r.o.Log.Info("migration", "bridge", bridge, "vip", v, "longest_gap", gaps[i].Round(time.Millisecond),
			"on_two_nodes", split[v].Round(time.Millisecond), "longest_stretch_on_two", longest[v].Round(time.Millisecond), "took", took.Round(time.Millisecond))
	}
	return nil
}

// migrateRows are the migration rows, with the goals on the
// bridge's.
func (r *runner) migrateRows() []Row {
	var rows []Row
	for _, m := range []struct {
		gap, twice string
		check      bool
		note       string
	}{
		{rowMigrateGap, rowMigrateTwice, true, "ipfailover's multicast fleet, each node in turn stopped (SIGTERM) and started with static unicast peers and OPENSHIFT_HA_MULTICAST_BRIDGE=true, /readyz awaited"},
		{rowMigrateGapPlain, rowMigrateTwiceP, false, "the same without the bridge: the unicast and multicast nodes each elect a master"},
		{rowMigrateShipGap, rowMigrateShipTwo, true, "the same from keepalived with the shipped image's configuration"},
	} {
		if len(r.samples[m.gap]) == 0 {
			continue
		}
		gap := TimeRow(m.gap, r.samples[m.gap], "", "")
		gap.Note = fmt.Sprintf("%s; a client probes every VIP every %s; until the holders settle", m.note, probeInterval)
		twice := TimeRow(m.twice, r.samples[m.twice], "", "")
		twice.Note = fmt.Sprintf("by netlink dumps of every node every %s over the whole migration", r.o.Poll)
		if m.check {
			gap.Check("worst", targetMigrateGap)
			twice.Check("worst", targetMigrateTwice)
		}
		rows = append(rows, gap, twice)
	}
	return rows
}
