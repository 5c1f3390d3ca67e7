package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// The rollout rows: every node's ipfailover restarted while a client probes
// every VIP, one node at a time as deploy/'s RollingUpdate does, or all at
// once as Recreate does.
const (
	rowRolling  = "rollout, one node at a time: longest gap per VIP"
	rowRecreate = "rollout, all at once (Recreate): longest gap per VIP"
	// probeInterval is how often the client probes each VIP.
	probeInterval = 5 * time.Millisecond
	// targetRolling is the bound on a rolling update's gap.
	targetRolling = 0.100
	// readyTimeout bounds the wait for a restarted node's /readyz.
	readyTimeout = 30 * time.Second
)

// rollout restarts every node of a converged fleet while the client probes
// each VIP every probeInterval, and adds each VIP's longest gap to row.
// Rolling: stop a node (SIGTERM, wait for the exit), start it again, wait
// until its /readyz answers 200, then the next node; what a Deployment with
// maxSurge 0, maxUnavailable 1 and the /readyz probe does, with the kubelet
// seeing readiness at once. Recreate: stop every node, then start them all
// and wait until all are ready.
func (r *runner) rollout(ctx context.Context, vips []netip.Addr, rolling bool) error {
	row := rowRecreate
	if rolling {
		row = rowRolling
	}
	f, err := r.start(ctx, Env(), vips, "")
	if err != nil {
		return err
	}
	// restart replaces f's processes; stop kills whichever run then.
	defer r.stop(f)
	prober, closeEchoes, err := r.probeVIPs(ctx, vips)
	if err != nil {
		return err
	}
	defer closeEchoes()
	stopped := false
	defer func() {
		if !stopped {
			prober.Stop(context.Background(), 0)
		}
	}()
	// Every VIP answers before the rollout begins.
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}

	began := time.Now()
	if rolling {
		for _, n := range r.c.Nodes {
			if err := r.restart(ctx, f, []*lab.Node{n}); err != nil {
				return fmt.Errorf("%s: %w", row, err)
			}
		}
	} else if err := r.restart(ctx, f, r.c.Nodes); err != nil {
		return fmt.Errorf("%s: %w", row, err)
	}
	took := time.Since(began)
	// The restarted nodes take their preferred VIPs back (preemption):
	// part of the rollout, so the probes go on until the holders settle.
	wctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	if _, err := r.w.WaitSettled(wctx, r.o.Poll, 2*settle(Env()), vips, func() error { return nil }, func(Snapshot, string) {}); err != nil {
		return fmt.Errorf("%s: after the restarts: %w", row, err)
	}
	gaps := prober.Stop(ctx, 100*time.Millisecond)
	stopped = true
	for i, g := range gaps {
		r.add(row, Sample{Value: g})
		r.o.Log.Info(row, "vip", vips[i], "longest_gap", g.Round(time.Millisecond), "restarts_took", took.Round(time.Millisecond))
	}
	return nil
}

// probeVIPs starts an echo server in every node and a client probing every
// VIP every probeInterval; the caller stops the prober, then calls
// closeEchoes.
func (r *runner) probeVIPs(ctx context.Context, vips []netip.Addr) (prober *Prober, closeEchoes func(), err error) {
	echoes, err := r.echoes()
	if err != nil {
		return nil, nil, err
	}
	closeEchoes = func() {
		for _, e := range echoes {
			e.Close()
		}
	}
	// The VIPs are off the lab's subnet: the client reaches them on its
	// link, by ARP, as a client on the nodes' network would.
	if out, err := r.c.Client.Exec(ctx, "ip", "route", "replace", vipPrefix(vips).String(), "dev", lab.Link); err != nil {
		closeEchoes()
		return nil, nil, fmt.Errorf("routing the VIPs in the client: %w: %s", err, out)
	}
	pc, err := ListenPacketIn(r.c.Client.Netns, ":0")
	if err != nil {
		closeEchoes()
		return nil, nil, err
	}
	targets := make([]netip.AddrPort, len(vips))
	for i, v := range vips {
		targets[i] = netip.AddrPortFrom(v, ProbePort)
	}
	prober = NewProber(pc, targets, probeInterval)
	prober.Start()
	return prober, closeEchoes, nil
}

// echoes starts a UDP echo server on 0.0.0.0:ProbePort in every node.
func (r *runner) echoes() ([]net.PacketConn, error) {
	var out []net.PacketConn
	for _, n := range r.c.Nodes {
		pc, err := ListenPacketIn(n.Netns, fmt.Sprintf("0.0.0.0:%d", ProbePort))
		if err != nil {
			for _, e := range out {
				e.Close()
			}
			return nil, err
		}
		go Echo(pc)
		out = append(out, pc)
	}
	return out, nil
}

// restart stops ipfailover on nodes (SIGTERM, all at once), starts it again
// on each and waits until each answers /readyz with 200.
func (r *runner) restart(ctx context.Context, f *fleet, nodes []*lab.Node) error {
	for _, n := range nodes {
		if err := f.proc(n).Signal(syscall.SIGTERM); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		code, err := f.proc(n).Wait(wctx)
		cancel()
		if err != nil {
			return err
		}
		if code != 0 {
			r.note("rollout: ipfailover on %s exited %d on SIGTERM", n.Name, code)
		}
	}
	for _, n := range nodes {
		p, err := n.Start(ctx, []string{r.o.Binary, "run"}, append(Env(), r.o.NodeEnv...), r.prefixed(n, ""))
		if err != nil {
			return err
		}
		i := slices.IndexFunc(f.procs, func(q *lab.Process) bool { return q.Node() == n })
		f.procs[i] = p
	}
	for _, n := range nodes {
		if err := r.waitReady(ctx, n, f.proc(n)); err != nil {
			return err
		}
	}
	return nil
}

// waitReady polls the node's /readyz, as the kubelet's readiness probe
// does, until it answers 200.
func (r *runner) waitReady(ctx context.Context, n *lab.Node, p *lab.Process) error {
	url := fmt.Sprintf("http://%s/readyz", netip.AddrPortFrom(n.Addr4, 9650))
	client := r.c.HTTPClient()
	client.Timeout = time.Second
	deadline := time.Now().Add(readyTimeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.Exited() {
			return fmt.Errorf("ipfailover on %s exited before it was ready", n.Name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not 200 within %s", n.Name, url, readyTimeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// rolloutRows are the two rollout rows; the rolling one has the issue's
// target on its worst gap.
func (r *runner) rolloutRows() []Row {
	if len(r.samples[rowRolling])+len(r.samples[rowRecreate]) == 0 {
		return nil
	}
	rolling := TimeRow(rowRolling, r.samples[rowRolling], "", "")
	rolling.Note = fmt.Sprintf("a client probes every VIP every %s (UDP echo from whichever node holds it) while each node in turn is stopped (SIGTERM), started and waited for until /readyz answers; until the holders settle again", probeInterval)
	rolling.Check("worst", targetRolling)
	recreate := TimeRow(rowRecreate, r.samples[rowRecreate], "", "")
	recreate.Note = "the same with every node stopped at once, then started"
	return []Row{rolling, recreate}
}

// vipPrefix is the /24 of the VIPs.
func vipPrefix(vips []netip.Addr) netip.Prefix {
	p, _ := vips[0].Prefix(24)
	return p
}
