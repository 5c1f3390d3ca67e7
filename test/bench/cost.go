package bench

import (
	"context"
	"fmt"
	"time"
)

// restSample is one node of a settled fleet over a window: its CPU and
// memory, and the VRRP packets per second it received and sent.
type restSample struct {
	cpuSample
	recv, sent float64
	// drops are the adverts keepalived's VRRP sockets dropped (receive
	// buffer full) during the window.
	drops uint64
	// respawns is how many times keepalived's parent respawned a child
	// that died (its VRRP process, killed at RLIMIT_RTTIME once keepalived
	// raised itself to realtime priority on a starved machine) during the
	// window.
	respawns int
	// masterships is how many times the node's keepalived entered MASTER
	// state during the window: none in a fleet at rest.
	masterships int
}

// atRest measures every node of the settled fleet f over window: the CPU
// time of the entrypoint and of keepalived's processes (cgroup v2
// usage_usec), the VRRP packets on eth0 (nftables counters in the node)
// and the memory at the end. cleanup removes the cgroups it made, also
// after an error: call it once the fleet's processes are gone.
func (r *runner) atRest(ctx context.Context, f *fleet, window time.Duration) (ss []restSample, cleanup func(), err error) {
	var gs [][2]*cpuGroup
	cleanup = func() {
		for _, g := range gs {
			for _, cg := range g {
				if err := cg.remove(); err != nil {
					r.note("removing %s: %v", cg.dir, err)
				}
			}
		}
	}
	for _, p := range f.procs {
		g, err := r.nodeGroups(p)
		if g[0] != nil {
			gs = append(gs, g)
		}
		if err != nil {
			return nil, cleanup, err
		}
	}
	var counters []*vrrpCounter
	defer func() {
		for _, c := range counters {
			if err := c.remove(context.WithoutCancel(ctx)); err != nil {
				r.note("removing the VRRP counters of %s: %v", c.n.Name, err)
			}
		}
	}()
	for _, p := range f.procs {
		c, err := countVRRP(ctx, p.Node())
		if err != nil {
			return nil, cleanup, err
		}
		counters = append(counters, c)
	}
	type mark struct {
		at       time.Time
		in, out  uint64
		masters  int
		respawns int
		drops    uint64
		cpu      [2]time.Duration
		readErr  error
		usageErr error
	}
	read := func(i int) mark {
		var m mark
		m.in, m.out, m.readErr = counters[i].read(ctx)
		m.cpu, m.usageErr = usages(gs[i][0], gs[i][1])
		m.masters = f.outs[i].Count(enteringMaster)
		m.respawns = f.outs[i].Count(respawning)
		if d, err := rawDrops(f.procs[i].Pid); err == nil {
			m.drops = d
		} else if m.readErr == nil {
			m.readErr = err
		}
		m.at = time.Now()
		return m
	}
	before := make([]mark, len(f.procs))
	for i := range f.procs {
		if before[i] = read(i); before[i].readErr != nil || before[i].usageErr != nil {
			return nil, cleanup, fmt.Errorf("%s: %w", f.procs[i].Node().Name, firstErr(before[i].readErr, before[i].usageErr))
		}
	}
	if err := sleep(ctx, window); err != nil {
		return nil, cleanup, err
	}
	for i, p := range f.procs {
		after := read(i)
		if after.readErr != nil || after.usageErr != nil {
			return nil, cleanup, fmt.Errorf("%s: %w", p.Node().Name, firstErr(after.readErr, after.usageErr))
		}
		took := after.at.Sub(before[i].at).Seconds()
		s := restSample{
			cpuSample: cpuSample{
				entrypoint: 100 * (after.cpu[0] - before[i].cpu[0]).Seconds() / took,
				keepalived: 100 * (after.cpu[1] - before[i].cpu[1]).Seconds() / took,
			},
			recv:        float64(after.in-before[i].in) / took,
			sent:        float64(after.out-before[i].out) / took,
			masterships: after.masters - before[i].masters,
			respawns:    after.respawns - before[i].respawns,
			drops:       grown(after.drops, before[i].drops),
		}
		if err := r.nodeMemory(p, &s.cpuSample); err != nil {
			return nil, cleanup, err
		}
		r.o.Log.Info("at rest", "node", p.Node().Name, "entrypoint_pct", fmt.Sprintf("%.3f", s.entrypoint), "keepalived_pct", fmt.Sprintf("%.3f", s.keepalived),
			"vrrp_recv_per_s", fmt.Sprintf("%.1f", s.recv), "vrrp_sent_per_s", fmt.Sprintf("%.1f", s.sent), "masterships_taken", s.masterships, "keepalived_respawns", s.respawns, "socket_drops", s.drops, "window", time.Duration(took*float64(time.Second)).Round(time.Millisecond))
		ss = append(ss, s)
	}
	if n := masterships(ss); n > 0 {
		r.note("a fleet measured at rest: its nodes entered MASTER state %d times during the %s window (not at rest: VIPs moved); keepalived respawned a dead child %d times", n, window, respawns(ss))
	}
	return ss, cleanup, nil
}

// keepalived's lines for an instance becoming master, and for a child
// process it starts again after the child died.
const (
	enteringMaster = "Entering MASTER STATE"
	respawning     = "died: Respawning"
)

func masterships(ss []restSample) int {
	n := 0
	for _, s := range ss {
		n += s.masterships
	}
	return n
}

// notAtRest starts the note of a row whose fleet moved VIPs during the
// window: its figures are a fleet's in turmoil, not its cost at rest.
func notAtRest(ss []restSample) string {
	if masterships(ss) == 0 && respawns(ss) == 0 {
		return ""
	}
	return "NOT AT REST (VIPs moved during the window: a starved machine?): "
}

func respawns(ss []restSample) int {
	n := 0
	for _, s := range ss {
		n += s.respawns
	}
	return n
}

// grown is how much a counter grew from before to now; a counter that
// went back started over (keepalived respawned its VRRP process, whose new
// sockets count from zero), and counts from zero.
func grown(now, before uint64) uint64 {
	if now < before {
		return now
	}
	return now - before
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// packetRow is a node's VRRP packets per second, received and sent; the
// note splits the medians.
func packetRow(name string, ss []restSample, window time.Duration) Row {
	var total, recv, sent []float64
	for _, s := range ss {
		total = append(total, s.recv+s.sent)
		recv = append(recv, s.recv)
		sent = append(sent, s.sent)
	}
	r := Row{Name: name, Unit: PacketRate, N: len(total)}
	if len(total) > 0 {
		r = r.summarize(total)
	}
	var drops uint64
	for _, s := range ss {
		drops += s.drops
	}
	r.Note = notAtRest(ss) + fmt.Sprintf("received %.0f/s, sent %.0f/s (medians over %s; nftables counters on eth0 in each node's namespace, IP protocol 112 on the input and output hooks); dropped by keepalived's VRRP sockets, receive buffer full, all nodes: %d (/proc/net/raw)",
		medianOf(recv), medianOf(sent), window, drops)
	return r
}

// restCPURow is a node's CPU use at rest, the entrypoint and keepalived's
// processes summed; the note splits the medians and the worsts.
func restCPURow(name string, ss []restSample, window time.Duration) Row {
	cs := make([]cpuSample, len(ss))
	var entry, ka []float64
	for i, s := range ss {
		cs[i] = s.cpuSample
		entry = append(entry, s.entrypoint)
		ka = append(ka, s.keepalived)
	}
	row := cpuRow(name, cs, window)
	row.Note = notAtRest(ss) + fmt.Sprintf("ipfailover %.3f %% median, %.3f %% worst; keepalived's processes %.3f %% median, %.3f %% worst (of one core, over %s, cgroup v2 usage_usec); instances entering MASTER during the windows, all nodes: %d (0 at rest); keepalived children respawned: %d",
		medianOf(entry), worstOf(entry), medianOf(ka), worstOf(ka), window, masterships(ss), respawns(ss))
	return row
}

// restRSSRow is a node's resident memory at the end of the window.
func restRSSRow(cpuName string, ss []restSample) Row {
	cs := make([]cpuSample, len(ss))
	for i, s := range ss {
		cs[i] = s.cpuSample
	}
	return rssRow(cpuName, cs)
}

func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return PercentRow("", vs, "").Median
}

func worstOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return PercentRow("", vs, "").Worst
}
