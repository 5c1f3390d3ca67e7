// Package chaos runs ipfailover under a seeded nemesis and measures what a
// client sees: a schedule of faults drawn from a seed (one at a time and
// overlapping), injected into a real cluster while a client probes every
// VIP over TCP every 10 ms and the VIPs' holders are read from the nodes'
// kernels; then, per fault kind, the outages each VIP suffered, how long any
// VIP sat on two nodes, each VIP's availability, the limits the VRRP timers
// allow held against every fault that ran alone, and the invariants a
// settled cluster must meet. The report is Markdown plus one PNG timeline
// per VIP.
package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault. Each names what the nemesis does and, where it has
// an end, how it is undone.
const (
	// ServiceStop stops the checked service on a node, and starts it
	// again after the fault's length.
	ServiceStop Kind = "service-stop"
	// KeepalivedKill SIGKILLs every keepalived process of a node at once
	// (stopped first, so none sends its goodbye); ipfailover restarts it.
	KeepalivedKill Kind = "keepalived-kill"
	// EntrypointTerm SIGTERMs a node's ipfailover (a pod deleted) and
	// starts it again after the fault's length (the replacement pod).
	EntrypointTerm Kind = "entrypoint-term"
	// NodeDeath kills every process of a node at once (the kubelet, the
	// container runtime and the containers of a real node); its kernel,
	// link and addresses stay. After the fault's length the node's
	// programs start again.
	NodeDeath Kind = "node-death"
	// NodeFreeze stops (SIGSTOP) every process of a node, as a paused
	// virtual machine's, and resumes them after the fault's length.
	NodeFreeze Kind = "node-freeze"
	// LinkCut pulls a node's cable at the switch, and plugs it back in.
	LinkCut Kind = "link-cut"
	// Partition drops VRRP between two nodes, both ways.
	Partition Kind = "partition"
	// PartitionOneWay drops the VRRP one node sends to another: the
	// second does not hear the first, the first hears the second.
	PartitionOneWay Kind = "partition-one-way"
	// Segment loses, delays and reorders what the segment carries.
	Segment Kind = "segment"
	// Rollout restarts ipfailover on every node, one node at a time, each
	// waited for until /readyz answers, as a RollingUpdate does (on the
	// cluster: kubectl rollout restart).
	Rollout Kind = "rollout"
	// AddressStorm stops (SIGSTOP) a node's ipfailover, keepalived
	// running on, adds and removes thousands of addresses on the node's
	// interface, and resumes it (SIGCONT) after the fault's length: the
	// kernel ends the address subscription of a listener that cannot
	// read. The same ipfailover must run on afterwards; keepalived holds
	// its VIPs throughout, so the fault is held to the tightest bound.
	AddressStorm Kind = "address-storm"
	// CPUStarve saturates every core of a node with other processes that
	// have a larger CPU share than ipfailover's (on the lab a process in
	// the node's cgroup, beside ipfailover's; on the cluster a pod of the
	// node with a larger CPU request), and stops them after the fault's
	// length. ipfailover and keepalived run on, so the holder keeps its
	// VIPs: no handover and no outage.
	CPUStarve Kind = "cpu-starve"

	// The cluster's own faults.

	// PodDelete deletes a node's ipfailover pod (kubectl delete pod); the
	// Deployment's replacement takes its place.
	PodDelete Kind = "pod-delete"
	// ConfigRollout changes ipfailover-config (the check's period, to and
	// fro) and rolls it out (kubectl rollout restart).
	ConfigRollout Kind = "config-rollout"
	// Drain drains a node (kubectl drain: its pod evicted, none to replace
	// it elsewhere) and uncordons it after the fault's length.
	Drain Kind = "drain"
	// APIServerStop stops the API server and starts it again after the
	// fault's length.
	APIServerStop Kind = "apiserver-stop"
)

// Limit is the class of VRRP timer bound an outage charged to a fault of a
// kind is held to.
type Limit int

const (
	// Graceful is for a holder that hands over (priority 0 adverts): 100 ms.
	Graceful Limit = iota
	// FailedCheck is for a holder whose check fails: check period + (fall-1) ×
	// retry + the best backup's skew.
	FailedCheck
	// DeadNode is for a holder that stops sending adverts, or a node
	// that stops hearing them (a partition, a lossy segment): 3 advert intervals + the best
	// backup's skew.
	DeadNode
)

func (l Limit) String() string {
	return [...]string{"graceful handover", "failed check", "dead node"}[l]
}

// kindInfo describes how a kind is drawn and judged.
type kindInfo struct {
	// nodes is how many distinct nodes the fault targets (0: none, it
	// is the segment's or every node's).
	nodes int
	// length is the range of the fault's length; zero for a fault that
	// is one action (its recovery is the cluster's own).
	length [2]time.Duration
	// down is set when the fault leaves its node unable to hold a VIP.
	down bool
	// mute is set when the fault also keeps its node from answering the
	// client at its own address: the checked service stopped, every
	// process killed or stopped, the cable pulled.
	mute bool
	// all is set for a fault that takes every node (a rollout).
	all bool
	// limit is the bound of an outage the fault causes alone.
	limit Limit
	// cooldown is the least time between two faults of the kind on one
	// node (keepalived's crash-loop rule counts deaths in a minute).
	cooldown time.Duration
	// keep is set when the fault's node must keep every VIP it holds: no
	// other node may hold one of them from the injection to KeepAfter
	// after the fault is undone (see Analysis.Handovers).
	keep bool
}

var kinds = map[Kind]kindInfo{
	ServiceStop:     {nodes: 1, length: [2]time.Duration{2 * time.Second, 8 * time.Second}, down: true, mute: true, limit: FailedCheck},
	KeepalivedKill:  {nodes: 1, down: true, limit: DeadNode, cooldown: 30 * time.Second},
	EntrypointTerm:  {nodes: 1, length: [2]time.Duration{time.Second, 5 * time.Second}, down: true, limit: Graceful},
	NodeDeath:       {nodes: 1, length: [2]time.Duration{4 * time.Second, 12 * time.Second}, down: true, mute: true, limit: DeadNode},
	NodeFreeze:      {nodes: 1, length: [2]time.Duration{2 * time.Second, 8 * time.Second}, down: true, mute: true, limit: DeadNode},
	LinkCut:         {nodes: 1, length: [2]time.Duration{3 * time.Second, 10 * time.Second}, down: true, mute: true, limit: DeadNode},
	Partition:       {nodes: 2, length: [2]time.Duration{3 * time.Second, 10 * time.Second}, limit: DeadNode},
	PartitionOneWay: {nodes: 2, length: [2]time.Duration{3 * time.Second, 10 * time.Second}, limit: DeadNode},
	Segment:         {length: [2]time.Duration{5 * time.Second, 15 * time.Second}, limit: DeadNode},
	Rollout:         {all: true, down: true, limit: Graceful},
	AddressStorm:    {nodes: 1, length: [2]time.Duration{2 * time.Second, 4 * time.Second}, limit: Graceful},
	CPUStarve:       {nodes: 1, length: [2]time.Duration{5 * time.Second, 30 * time.Second}, limit: Graceful, keep: true},
	PodDelete:       {nodes: 1, down: true, limit: Graceful},
	ConfigRollout:   {all: true, down: true, limit: Graceful},
	Drain:           {nodes: 1, length: [2]time.Duration{3 * time.Second, 10 * time.Second}, down: true, limit: Graceful},
	APIServerStop:   {length: [2]time.Duration{5 * time.Second, 20 * time.Second}, limit: DeadNode},
}

// KeepAfter is how long after a keep fault (CPUStarve) is undone its node
// must still hold every VIP it held: a backup whose master-down timer ran
// out on the starved holder's late adverts takes over just after the
// fault as well as during it.
const KeepAfter = 2 * time.Second

// Keeps reports whether a fault of kind k must leave its node every VIP it
// holds.
func Keeps(k Kind) bool { return kinds[k].keep }

// LimitOf returns the limit class of a kind.
func LimitOf(k Kind) Limit { return kinds[k].limit }

// Down reports whether a fault of kind k leaves its nodes unable to hold a
// VIP while it lasts.
func Down(k Kind) bool { return kinds[k].down }

// Mutes reports whether a fault of kind k keeps its nodes from answering
// the client at their own addresses while it lasts (see Data.Hiccups).
func Mutes(k Kind) bool { return kinds[k].mute }

// LabKinds are the kinds the namespace lab injects, each with its weight
// in the draw.
var LabKinds = []Weighted{
	{ServiceStop, 3}, {KeepalivedKill, 2}, {EntrypointTerm, 3}, {NodeDeath, 2}, {NodeFreeze, 2},
	{LinkCut, 2}, {Partition, 2}, {PartitionOneWay, 2}, {Segment, 2}, {Rollout, 1}, {AddressStorm, 2},
	{CPUStarve, 2},
}

// KubeKinds are the kinds the real cluster injects. Its node death is the
// cluster's: every process of the machine killed (daemons, shims,
// containers) and its link cut, then a reboot.
var KubeKinds = []Weighted{
	{ServiceStop, 2}, {KeepalivedKill, 1}, {EntrypointTerm, 1}, {PodDelete, 2}, {Drain, 2}, {NodeDeath, 2},
	{NodeFreeze, 1}, {LinkCut, 2}, {Partition, 1}, {PartitionOneWay, 1}, {Segment, 1}, {Rollout, 1},
	{ConfigRollout, 1}, {APIServerStop, 2}, {AddressStorm, 2}, {CPUStarve, 2},
}

// Weighted is a kind and its weight in the draw.
type Weighted struct {
	Kind   Kind
	Weight int
}

// Fault is one planned fault.
type Fault struct {
	// Index is the fault's place in the schedule, from 1.
	Index int
	Kind  Kind
	// Start is when it begins, from the start of the nemesis; Length how
	// long it lasts (0 for one action, such as a kill or a rollout).
	Start, Length time.Duration
	// Nodes are the indexes of its target nodes (0-based): one node, or,
	// for a partition, the two nodes, the first being the one that does
	// not hear the second (both ways: neither hears the other).
	Nodes []int
	// Loss, Delay and Jitter shape a Segment fault.
	Loss          float64
	Delay, Jitter time.Duration
}

// End is when the fault is planned to be undone.
func (f Fault) End() time.Duration { return f.Start + f.Length }

// Describe says what the fault does, naming nodes with names.
func (f Fault) Describe(names []string) string {
	n := func(i int) string {
		if i < len(names) {
			return names[i]
		}
		return fmt.Sprintf("node#%d", i)
	}
	switch f.Kind {
	case Partition:
		return fmt.Sprintf("%s: VRRP dropped between %s and %s", f.Kind, n(f.Nodes[0]), n(f.Nodes[1]))
	case PartitionOneWay:
		return fmt.Sprintf("%s: %s does not hear %s's VRRP", f.Kind, n(f.Nodes[0]), n(f.Nodes[1]))
	case Segment:
		return fmt.Sprintf("%s: loss %.0f%%, delay %s ± %s", f.Kind, f.Loss*100, f.Delay, f.Jitter)
	case Rollout, ConfigRollout:
		return fmt.Sprintf("%s: every node, one at a time", f.Kind)
	case APIServerStop:
		return fmt.Sprintf("%s: the API server stopped", f.Kind)
	}
	return fmt.Sprintf("%s on %s", f.Kind, n(f.Nodes[0]))
}

// Profile shapes a schedule.
type Profile struct {
	// Nodes is the number of nodes.
	Nodes int
	// Kinds are the kinds to draw from, with weights.
	Kinds []Weighted
	// Warmup is how long the nemesis waits before the first fault; Tail
	// how long before the end no fault runs, so the cluster settles.
	Warmup, Tail time.Duration
	// Gap is the range of the time between two faults' starts.
	Gap [2]time.Duration
	// Recovery is how long a node stays out of the draw after a fault on
	// it ended: the time its programs need to be back.
	Recovery time.Duration
	// PerNode is how long a fault on every node (a rollout) takes per
	// node.
	PerNode time.Duration
}

// DefaultProfile is the profile of a run on n nodes with these kinds.
func DefaultProfile(n int, ks []Weighted) Profile {
	return Profile{
		Nodes:    n,
		Kinds:    ks,
		Warmup:   5 * time.Second,
		Tail:     20 * time.Second,
		Gap:      [2]time.Duration{2 * time.Second, 8 * time.Second},
		Recovery: 5 * time.Second,
		PerNode:  2 * time.Second,
	}
}

// KubeProfile is the profile of a run on the real cluster: its pods take
// longer to be back than the lab's processes, its rollouts a few seconds
// a node, and the first fault waits for the cluster to settle.
func KubeProfile(n int) Profile {
	return Profile{
		Nodes:    n,
		Kinds:    KubeKinds,
		Warmup:   10 * time.Second,
		Tail:     30 * time.Second,
		Gap:      [2]time.Duration{4 * time.Second, 12 * time.Second},
		Recovery: 15 * time.Second,
		PerNode:  10 * time.Second,
	}
}

// Schedule is the faults of one run, in order of start.
type Schedule struct {
	Seed     uint64
	Duration time.Duration
	Faults   []Fault
}

// Plan draws the schedule of a run of length d from seed: a pure function
// of its arguments, so a seed replays the same faults. Faults start Gap
// apart; each picks a kind by weight and targets among the nodes free at
// its start (a node takes one fault at a time, and stays out of the draw
// for Recovery after it); faults on different nodes, and the segment's,
// overlap freely, but at least one node is always left up. A draw that
// finds no free target is skipped.
func Plan(seed uint64, d time.Duration, p Profile) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x1f5ea7e5))
	s := Schedule{Seed: seed, Duration: d}
	total := 0
	for _, w := range p.Kinds {
		total += w.Weight
	}
	if total == 0 || p.Nodes < 2 {
		return s
	}
	// busyUntil is when each node is free again; shared, when each fault
	// on no node (the segment, the API server) is.
	busyUntil := make([]time.Duration, p.Nodes)
	shared := map[Kind]time.Duration{}
	// lastOn is when a kind with a cooldown last hit each node.
	lastOn := map[Kind]map[int]time.Duration{}
	last := d - p.Tail
	for t := p.Warmup; t < last; t += between(rng, p.Gap) {
		k := pick(rng, p.Kinds, total)
		info := kinds[k]
		f := Fault{Kind: k, Start: t, Length: between(rng, info.length)}
		if f.End() > last {
			f.Length = last - t
			if f.Length < info.length[0] {
				continue
			}
		}
		switch {
		case info.all:
			if slices.ContainsFunc(busyUntil, func(u time.Duration) bool { return u > t }) {
				continue
			}
			// A rollout lasts what the cluster takes: PerNode a node.
			for i := range p.Nodes {
				busyUntil[i] = t + time.Duration(p.Nodes)*p.PerNode + p.Recovery
			}
		case info.nodes == 0:
			if shared[k] > t {
				continue
			}
			if k == Segment {
				f.Loss = float64(rng.IntN(6)) / 100                      // 0..5 %
				f.Delay = time.Duration(rng.IntN(41)) * time.Millisecond // 0..40 ms
				f.Jitter = time.Duration(rng.Int64N(int64(f.Delay/time.Millisecond)/2+1)) * time.Millisecond
			}
			shared[k] = f.End() + time.Second
		default:
			var free []int
			for i := range p.Nodes {
				if at, hit := lastOn[k][i]; busyUntil[i] <= t && (!hit || t-at >= info.cooldown) {
					free = append(free, i)
				}
			}
			if len(free) < info.nodes {
				continue
			}
			rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
			f.Nodes = slices.Clone(free[:info.nodes])
			if info.down && downAt(s.Faults, p, t)+1 >= p.Nodes {
				continue
			}
			for _, i := range f.Nodes {
				busyUntil[i] = f.End() + p.Recovery
				if info.cooldown > 0 {
					if lastOn[k] == nil {
						lastOn[k] = map[int]time.Duration{}
					}
					lastOn[k][i] = t
				}
			}
		}
		f.Index = len(s.Faults) + 1
		s.Faults = append(s.Faults, f)
	}
	return s
}

// downAt is how many nodes the faults that take a node down hold at t,
// their recovery included.
func downAt(fs []Fault, p Profile, t time.Duration) int {
	down := map[int]bool{}
	for _, f := range fs {
		info := kinds[f.Kind]
		end := f.End() + p.Recovery
		if info.all {
			end += time.Duration(p.Nodes) * p.PerNode
		}
		if !info.down || t < f.Start || t > end {
			continue
		}
		// A rollout takes one node down at a time, and nothing else
		// starts on any node while it runs.
		if info.all {
			down[-1] = true
		}
		for _, i := range f.Nodes {
			down[i] = true
		}
	}
	return len(down)
}

func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	// Whole milliseconds, so the schedule prints exactly.
	return r[0] + time.Duration(rng.Int64N(int64((r[1]-r[0])/time.Millisecond)+1))*time.Millisecond
}

func pick(rng *rand.Rand, ws []Weighted, total int) Kind {
	n := rng.IntN(total)
	for _, w := range ws {
		if n < w.Weight {
			return w.Kind
		}
		n -= w.Weight
	}
	return ws[len(ws)-1].Kind
}

// String prints the schedule, one fault a line, nodes by name.
func (s Schedule) String(names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s, %d faults, digest %s\n", s.Seed, s.Duration, len(s.Faults), s.Digest())
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  #%-3d %8s  %-7s  %s\n", f.Index, fmtOffset(f.Start), lengthText(f), f.Describe(names))
	}
	return b.String()
}

func lengthText(f Fault) string {
	if f.Length == 0 {
		return "-"
	}
	return fmtOffset(f.Length)
}

// Digest is a short hash of the schedule's content: two runs with the same
// digest drew the same faults.
func (s Schedule) Digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%d %d\n", s.Seed, s.Duration)
	for _, f := range s.Faults {
		fmt.Fprintf(h, "%d %s %d %d %v %g %d %d\n", f.Index, f.Kind, f.Start, f.Length, f.Nodes, f.Loss, f.Delay, f.Jitter)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// fmtOffset prints a duration as seconds with milliseconds: "12.345s".
func fmtOffset(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// allKinds lists every kind in a fixed order, for tables and colours.
func allKinds() []Kind {
	var ks []Kind
	for _, w := range append(slices.Clone(LabKinds), KubeKinds...) {
		if !slices.Contains(ks, w.Kind) {
			ks = append(ks, w.Kind)
		}
	}
	return ks
}
