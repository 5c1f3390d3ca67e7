package kubee2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The bounds of the membership tests, with room for a machine several
// times slower than this one (make bench measures the figures).
const (
	// splitBound bounds the time a VIP may sit on two nodes: a handover
	// by preemption (the new master's advert makes the old one release)
	// overlaps for milliseconds; a new pod that the others did not list
	// would keep a VIP twice for good.
	splitBound = time.Second
	// masterDown is keepalived's master-down interval at the manifests'
	// advert interval: the others must list a new pod well inside it.
	masterDown = 3 * fastAdvert
	// reloadBound bounds the time from a pod's address being published
	// to the others' reloads (make bench: the goal is 1 s), and from the
	// end of a left pod's hold (membership.PeerHold after its deletion)
	// to the others' reloads without it.
	reloadBound = 3 * time.Second
	// watchBackBound bounds the time from the API server answering again
	// to every pod watching. They try every 2 s (the metric is read every
	// second) and connect within 5 s; client-go's own backoff would have
	// grown to 30-60 s after minutes away. Measured: 0-2 s on a quiet
	// machine, 19 s once with other tests running on the same 2 cores.
	watchBackBound = 30 * time.Second
	// apiAway is how long the API server stays away: longer than
	// client-go's longest backoff (30 s), short enough for CI's budget.
	// The pods reach it through the kubernetes Service, which kube-proxy
	// serves again 40-70 s after it is back: they are without it for
	// about two minutes.
	apiAway = time.Minute
	// renumberBound bounds the time from a node's address changing to
	// every other pod running keepalived with the new one: inside the
	// master-down interval, so that the others hear the renumbered node
	// before it would take their VIPs.
	renumberBound = masterDown
)

// TestPeersFromPods: the manifests' default mode, unicast with the other
// pods of the workload as peers, through what changes the membership: a
// pod joins on a new node, the API server goes away for minutes, a pod's
// node leaves. A client probes every VIP every 10 ms, the nodes' addresses
// are read every 10 ms, and every pod's split-brain metrics are read.
func TestPeersFromPods(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 20*time.Minute)
	since := time.Now()
	services(t, c)
	o := overlay("overlays/kubernetes", nil)
	o.Replicas = 2
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, o) })
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	pods := readyPods(ctx, t, c, 2)
	settled(ctx, t, c, vips)

	t.Run("each pod publishes its address and lists the others", func(t *testing.T) {
		checkListed(ctx, t, c, pods)
		checkPermissions(ctx, t, c)
	})

	t.Run("join: a pod on a new node", func(t *testing.T) {
		before := pods
		began := time.Now()
		var total, longest map[netip.Addr]time.Duration
		gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
			m := c.Lab().MeterSplits(vips, probeEvery, nil)
			defer func() { total, longest = m.Stop() }()
			if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "scale", deployment, "--replicas=3"); err != nil {
				return err
			}
			pods = readyPods(ctx, t, c, 3)
			_, err := c.Holders(ctx, vips, quiet)
			return err
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkGaps(t, "a pod joins", gaps)
		checkSplits(t, "a pod joins", total, longest)
		joined := newPods(pods, before)
		if len(joined) != 1 {
			t.Fatalf("new pods %v, want one", joined)
		}
		subject := logsOf(ctx, t, c, joined[0].Name)
		published := kube.LogTimes(subject, "published this pod's unicast address")
		// (The others may log their reload a few milliseconds before the
		// new pod logs the answer to its patch.)
		started := kube.LogTimes(subject, "keepalived started")
		if len(started) == 0 {
			t.Fatalf("%s never started keepalived", joined[0].Name)
		}
		for name, at := range listedAfter(ctx, t, c, joined[0], subject, before, began, "published this pod's unicast address", "added", 0) {
			if d := at.Sub(published[0]); d > reloadBound {
				t.Errorf("%s listed the new pod %s after it published its address, want at most %s", name, d, reloadBound)
			}
			// Its keepalived stays BACKUP for a master-down interval.
			if d := at.Sub(started[0]); d > masterDown {
				t.Errorf("%s listed the new pod %s after its keepalived started, want well inside the master-down interval (%s)", name, d, masterDown)
			}
		}
		checkListed(ctx, t, c, pods)
		checkNoDuplicates(ctx, t, c)
	})

	t.Run("renumber: a node's address changes and changes back", func(t *testing.T) {
		h := settled(ctx, t, c, vips)
		// The node of the first VIP's master, so that its VIPs must stay
		// put (or move once) while its source address changes.
		var m *kube.Machine
		for _, n := range c.Nodes {
			if n.Lab() == h[vips[0]] {
				m = n
			}
		}
		if m == nil {
			t.Fatalf("%s is on no node of the cluster", vips[0])
		}
		var subject corev1.Pod
		for _, p := range pods {
			if p.Spec.NodeName == m.Name {
				subject = p
			}
		}
		old, moved := m.Lab().Addr4, netip.MustParseAddr(renumberedAddr)
		others := slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool { return p.Name == subject.Name })
		var total, longest map[netip.Addr]time.Duration
		var took [2]time.Duration
		began := time.Now()
		t.Cleanup(func() {
			// Back to the old address if the test stopped half-way.
			_, _ = m.Lab().Exec(context.Background(), "ip", "addr", "add", old.String()+"/24", "dev", "eth0")
			_, _ = m.Lab().Exec(context.Background(), "ip", "addr", "del", moved.String()+"/24", "dev", "eth0")
		})
		gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
			ms := c.Lab().MeterSplits(vips, probeEvery, func(h lab.HolderMap) { t.Logf("holders %s", h) })
			defer func() { total, longest = ms.Stop() }()
			var gone time.Time
			for i, step := range [][2]netip.Addr{{old, moved}, {moved, old}} {
				at, err := renumber(ctx, m.Lab(), step[0], step[1])
				if err != nil {
					return err
				}
				if i == 0 {
					gone = at
				} else {
					renumberedFor(old, gone, at)
				}
				d, err := listedEverywhere(ctx, c, others, step[1], at)
				if err != nil {
					return err
				}
				took[i] = d
				t.Logf("%s renumbered %s to %s: every other pod runs keepalived with %s %s later", m.Name, step[0], step[1], step[1], d.Round(time.Millisecond))
				// Renumbered, the node's kubelet cannot reach the API
				// server (its connections leave from the old address):
				// back well before the node counts as not ready (16 s
				// here, 40 s by default).
				settle := quiet
				if i == 0 {
					settle = 2 * advert
				}
				if _, err := c.Holders(ctx, vips, settle); err != nil {
					return err
				}
			}
			return nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range took {
			if d > renumberBound {
				t.Errorf("renumber %d: the other pods listed the new address %s after it was made, want at most %s", i+1, d.Round(time.Millisecond), renumberBound)
			}
		}
		// The address it moved to and back from is held a while by the
		// others (membership.PeerHold), then dropped in one reload: before
		// the next case, which needs the peers to stay put.
		dropped, err := c.WaitReloads(ctx, kube.Namespace, others, moved, "removed", began, membership.PeerHold+reloadBound)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range others {
			if len(dropped[o.Name]) == 0 {
				t.Errorf("%s never dropped %s, the address %s moved to and back from, after the hold (%s)", o.Name, moved, m.Name, membership.PeerHold)
				continue
			}
			t.Logf("%s dropped %s %s after the renumbering began", o.Name, moved, dropped[o.Name][0].Sub(began).Round(time.Millisecond))
		}
		// The renumbered node's goodbye from its old address (still
		// listed for a while) hands its VIPs over as in a rollout.
		checkGaps(t, "a node renumbered twice", gaps)
		checkSplits(t, "a node renumbered", total, longest)
		checkListed(ctx, t, c, pods)
		checkNoDuplicates(ctx, t, c)
		if t.Failed() {
			for _, p := range pods {
				t.Logf("%s on %s:\n%s", p.Name, p.Spec.NodeName, eventsIn(logsOf(ctx, t, c, p.Name), began))
			}
		}
	})

	t.Run("the API server away for minutes", func(t *testing.T) {
		before := settled(ctx, t, c, vips)
		changes := map[string]float64{}
		for _, n := range c.Nodes {
			m, err := c.Metrics(ctx, n.Lab())
			if err != nil {
				t.Fatal(err)
			}
			changes[n.Name] = m.Sum("ipfailover_membership_last_change_timestamp_seconds", nil)
		}
		t.Cleanup(func() {
			if _, ok := c.ControlPlane.Running(kube.APIServer); !ok {
				if err := c.ControlPlane.Start(context.Background(), kube.APIServer); err != nil {
					t.Error(err)
				}
			}
		})
		stopped := time.Now()
		gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
			if err := c.ControlPlane.Stop(ctx, kube.APIServer); err != nil {
				return err
			}
			began := time.Now()
			// Every pod notices, and says so in its metrics.
			for _, n := range c.Nodes {
				waitMetric(ctx, t, c, n, "ipfailover_membership_watch_up", 0)
			}
			t.Logf("every pod reports the watch down %s after the API server stopped", time.Since(began).Round(time.Second))
			if err := sleepCtx(ctx, apiAway-time.Since(began)); err != nil {
				return err
			}
			for _, n := range c.Nodes {
				m, err := c.Metrics(ctx, n.Lab())
				if err != nil {
					return err
				}
				if got := m.Sum("ipfailover_membership_last_change_timestamp_seconds", nil); got != changes[n.Name] {
					t.Errorf("%s changed its peers while the API server was away", n.Name)
				}
				if got := m.Sum("ipfailover_membership_peers", nil); got != 2 {
					t.Errorf("%s runs %v peers while the API server is away, want its last 2", n.Name, got)
				}
			}
			if err := c.ControlPlane.Start(ctx, kube.APIServer); err != nil {
				return err
			}
			if err := c.WaitAPI(ctx); err != nil {
				return err
			}
			answered := time.Now()
			// The pods reach the API server through the kubernetes
			// Service, which kube-proxy serves again only once its own
			// watch (client-go's backoff) sees the API server's
			// endpoint back: time the pods from then.
			back := serviceBack(ctx, t, c)
			t.Logf("the kubernetes Service answered %s after the API server did", back.Sub(answered).Round(time.Second))
			for _, n := range c.Nodes {
				waitMetric(ctx, t, c, n, "ipfailover_membership_watch_up", 1)
			}
			// The pods try every 2 s (client-go's own backoff had
			// grown to 30-60 s).
			took := time.Since(back)
			t.Logf("every pod watches again %s after the kubernetes Service answered", took.Round(time.Second))
			if took > watchBackBound {
				t.Errorf("the pods watched again %s after the kubernetes Service answered, want at most %s", took.Round(time.Second), watchBackBound)
			}
			return nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkGaps(t, "the API server away", gaps)
		// Back, the node controller has heard no kubelet for minutes: it
		// marks each node NotReady until that node's kubelet reports again,
		// and evicts the pods of a node still silent after the toleration
		// (10 s in this cluster, 300 s by default). Such an eviction is the
		// cluster's doing, not ours: that pod leaves as in "leave", its
		// replacement takes its VIPs back (the ranks follow the nodes'
		// addresses), and the holders must end as they were.
		if err := c.WaitNodesUntainted(ctx); err != nil {
			t.Fatal(err)
		}
		now, err := c.Pods(ctx, podLabel)
		if err != nil {
			t.Fatal(err)
		}
		// An evicted pod may still be terminating (its kubelet ends it).
		now = slices.DeleteFunc(now, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		if left := newPods(pods, now); len(left) > 0 {
			evicted := evictedSince(ctx, t, c, stopped)
			for _, p := range left {
				if !evicted[p.Name] {
					t.Errorf("%s on %s went while the API server was away, and the node controller did not evict it", p.Name, p.Spec.NodeName)
					continue
				}
				t.Logf("the node controller evicted %s from %s after the API server returned (its kubelet reported late)", p.Name, p.Spec.NodeName)
			}
			pods = readyPods(ctx, t, c, len(pods))
		}
		if after := settled(ctx, t, c, vips); after.String() != before.String() {
			t.Errorf("the holders moved while the API server was away: %s before, %s after", before, after)
		}
	})

	t.Run("leave: a pod's node goes", func(t *testing.T) {
		before := pods
		// (A pod evicted earlier from the same node, with the same
		// address, has reloads of its own in the others' logs.)
		began := time.Now()
		// The leaving pod's log goes with it: follow every log from now.
		follow := c.FollowLogs(ctx, kube.Namespace, before)
		gone, stop, err := c.WatchGone(ctx, kube.Namespace, podLabel)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		var total, longest map[netip.Addr]time.Duration
		gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
			m := c.Lab().MeterSplits(vips, probeEvery, nil)
			defer func() { total, longest = m.Stop() }()
			if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "scale", deployment, "--replicas=2"); err != nil {
				return err
			}
			pods = readyPods(ctx, t, c, 2)
			_, err := c.Holders(ctx, vips, quiet)
			return err
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkGaps(t, "a pod leaves", gaps)
		checkSplits(t, "a pod leaves", total, longest)
		left := newPods(before, pods)
		if len(left) != 1 {
			t.Fatalf("pods gone %v, want one", left)
		}
		// It was listed until it was gone, and its address held for the
		// hold after: the others dropped it after its keepalived had
		// stopped (and sent its goodbye), in one reload a hold later.
		leftLog := follow(left[0].Name)
		stopped := kube.LogTimes(leftLog, "keepalived stopped")
		reloaded := listedAfter(ctx, t, c, left[0], leftLog, pods, began, "keepalived stopped", "removed", membership.PeerHold+reloadBound)
		for name, at := range reloaded {
			if len(stopped) > 0 && at.Before(stopped[len(stopped)-1]) {
				t.Errorf("%s dropped %s before its keepalived stopped: its goodbye was not heard", name, left[0].Name)
			}
		}
		// And dropped once the hold had ended after it was gone from the
		// API server.
		if at, ok := gone(left[0].Name); ok {
			for name, r := range reloaded {
				d := r.Sub(at)
				// Less than the hold: it went as its containers ended (the
				// field selector leaves ended pods out), before the object.
				t.Logf("%s reloaded without %s %s from its deletion (the hold: %s)", name, left[0].Name, d.Round(time.Millisecond), membership.PeerHold)
				if d < membership.PeerHold-reloadBound || d > membership.PeerHold+reloadBound {
					t.Errorf("%s reloaded without %s %s after it was deleted, want the hold %s give or take %s", name, left[0].Name, d.Round(time.Millisecond), membership.PeerHold, reloadBound)
				}
			}
		} else {
			t.Errorf("the watch never saw %s deleted", left[0].Name)
		}
		checkListed(ctx, t, c, pods)
		checkNoDuplicates(ctx, t, c)
	})

	checkEvents(ctx, t, c, since)
}

// renumberedAddr is the address a node moves to and back from.
const renumberedAddr = "192.0.2.71"

// renumber moves n's address from to to the way a DHCP renewal or an
// operator does: to added (a secondary), from deleted (to promoted), and
// returns when from went.
func renumber(ctx context.Context, n *lab.Node, from, to netip.Addr) (time.Time, error) {
	for _, argv := range [][]string{
		{"sysctl", "-qw", "net.ipv4.conf.eth0.promote_secondaries=1"},
		{"ip", "addr", "add", to.String() + "/24", "dev", "eth0"},
		{"ip", "addr", "del", from.String() + "/24", "dev", "eth0"},
	} {
		if _, err := n.Exec(ctx, argv...); err != nil {
			return time.Time{}, err
		}
	}
	return time.Now(), nil
}

// listedEverywhere waits until every pod of others runs keepalived with
// addr among its peers, and returns how long after since the last one
// started to (zero for a pod that listed it already: a renumbered node's
// former address stays listed for a while).
func listedEverywhere(ctx context.Context, c *kube.Cluster, others []corev1.Pod, addr netip.Addr, since time.Time) (time.Duration, error) {
	for {
		var last time.Time
		all := true
		for _, o := range others {
			logs, err := c.Kubectl(ctx, "-n", kube.Namespace, "logs", o.Name)
			if err != nil {
				return 0, err
			}
			at, ok := listedAt(logs, addr, since)
			if !ok {
				all = false
				break
			}
			if at.After(last) {
				last = at
			}
		}
		if all {
			return max(last.Sub(since), 0), nil
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return 0, fmt.Errorf("waiting for every pod to list %s: %w", addr, err)
		}
	}
}

var reloadPeers = regexp.MustCompile(`^time=(\S+) .*msg="reloaded keepalived" .*peers="?\[([^\]]*)\]`)

// listedAt reads a pod's reloads: since when, from since on, its keepalived
// has listed addr (since itself when it did already).
func listedAt(logs []byte, addr netip.Addr, since time.Time) (time.Time, bool) {
	var at time.Time
	listed := false
	for _, l := range strings.Split(string(logs), "\n") {
		m := reloadPeers.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		has := slices.Contains(strings.Fields(m[2]), addr.String())
		switch {
		case has && !listed:
			listed, at = true, t
			if t.Before(since) {
				at = since
			}
		case !has:
			listed = false
		}
	}
	return at, listed
}

// eventsIn are the lines of a pod's log from since on that say what
// happened: keepalived's state changes and reloads, ipfailover's lines but
// its debug ones.
func eventsIn(log []byte, since time.Time) string {
	var out []string
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "level=DEBUG") || strings.Contains(l, "Printing VRRP") || strings.Contains(l, "Truncating") {
			continue
		}
		if ts := kube.LogTimes([]byte(l), ""); len(ts) == 1 && ts[0].Before(since) {
			continue
		}
		// keepalived's own lines: "Wed Nov 25 22:10:23 2026: ...", UTC.
		if stamp, _, ok := strings.Cut(l, ": "); ok {
			if ts, err := time.Parse(time.ANSIC, stamp); err == nil && ts.Before(since.Truncate(time.Second)) {
				continue
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// readyPods waits until n ipfailover pods are Ready, on n nodes, and no
// other is left, and returns them.
func readyPods(ctx context.Context, t *testing.T, c *kube.Cluster, n int) []corev1.Pod {
	t.Helper()
	for {
		pods, err := c.Pods(ctx, podLabel)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && kube.Ready(p) {
				nodes[p.Spec.NodeName] = true
			}
		}
		if len(nodes) == n && len(pods) == n {
			return pods
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d Ready pods: %v", n, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// evictedSince names the pods the taint eviction controller marked for
// deletion at or after since.
func evictedSince(ctx context.Context, t *testing.T, c *kube.Cluster, since time.Time) map[string]bool {
	t.Helper()
	events, err := c.Events(ctx, "reason=TaintManagerEviction", since)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range events {
		if e.InvolvedObject.Kind == "Pod" && strings.HasPrefix(e.Message, "Marking for deletion") {
			out[e.InvolvedObject.Name] = true
		}
	}
	return out
}

// newPods are the pods of now that were not in before.
func newPods(now, before []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range now {
		if !slices.ContainsFunc(before, func(q corev1.Pod) bool { return q.Name == p.Name }) {
			out = append(out, p)
		}
	}
	return out
}

// nodeAddr is the address of the node a pod runs on.
func nodeAddr(t *testing.T, c *kube.Cluster, p corev1.Pod) netip.Addr {
	t.Helper()
	m := c.Node(p.Spec.NodeName)
	if m == nil {
		t.Fatalf("%s runs on %q, not a node of the cluster", p.Name, p.Spec.NodeName)
	}
	return m.Lab().Addr4
}

// logsOf is the log of a pod of kube.Namespace (its current container's).
func logsOf(ctx context.Context, t *testing.T, c *kube.Cluster, pod string) []byte {
	t.Helper()
	out, err := c.Kubectl(ctx, "-n", kube.Namespace, "logs", pod)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listedAfter finds, in subject's log, the line msg (its publication, its
// stop) and, in each pod of others, the reload that added or removed
// subject's address at or after since; it fails when one of them never
// reloaded for it, and returns when each did.
func listedAfter(ctx context.Context, t *testing.T, c *kube.Cluster, subject corev1.Pod, subjectLog []byte, others []corev1.Pod, since time.Time, msg, change string, within time.Duration) map[string]time.Time {
	t.Helper()
	addr := nodeAddr(t, c, subject)
	at := kube.LogTimes(subjectLog, msg)
	if len(at) == 0 {
		t.Fatalf("%s never logged %q", subject.Name, msg)
	}
	others = slices.DeleteFunc(slices.Clone(others), func(o corev1.Pod) bool { return o.Name == subject.Name })
	reloads, err := c.WaitReloads(ctx, kube.Namespace, others, addr, change, since, within)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, o := range others {
		ts := reloads[o.Name]
		if len(ts) == 0 {
			logs := logsOf(ctx, t, c, o.Name)
			var lines []string
			for _, l := range strings.Split(string(logs), "\n") {
				if strings.Contains(l, "reloaded keepalived") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					lines = append(lines, l)
				}
			}
			t.Errorf("%s never reloaded keepalived with %s %s; its reloads and warnings:\n%s", o.Name, addr, change, strings.Join(lines, "\n"))
			continue
		}
		d := ts[0].Sub(at[0])
		t.Logf("%s reloaded with %s (%s) %s %s after %q", o.Name, addr, subject.Name, change, d.Round(time.Millisecond), msg)
		out[o.Name] = ts[0]
	}
	return out
}

// checkListed: every pod publishes its node's address, and `ipfailover
// peers` in it shows every other pod in, listed in its running
// keepalived.conf.
func checkListed(ctx context.Context, t *testing.T, c *kube.Cluster, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		var got corev1.Pod
		if err := c.KubectlJSON(ctx, &got, "-n", kube.Namespace, "get", "pod", p.Name); err != nil {
			t.Fatal(err)
		}
		if a, want := got.Annotations["ipfailover/unicast-src-ip"], nodeAddr(t, c, p).String(); a != want {
			t.Errorf("%s publishes %q, want its node's %s", p.Name, a, want)
		}
	}
	for _, p := range pods {
		out, err := c.Kubectl(ctx, "-n", kube.Namespace, "exec", p.Name, "--", "ipfailover", "peers")
		if err != nil {
			t.Fatalf("ipfailover peers in %s: %v\n%s", p.Name, err, out)
		}
		for _, q := range pods {
			if q.Name == p.Name {
				continue
			}
			row := rowOf(out, q.Name)
			if f := strings.Fields(row); len(f) < 4 || f[2] != "in" || f[3] != "listed" {
				t.Errorf("ipfailover peers in %s: %s is not in and listed:\n%s", p.Name, q.Name, out)
			}
		}
	}
}

func rowOf(table []byte, first string) string {
	for _, line := range strings.Split(string(table), "\n") {
		if strings.HasPrefix(line, first+" ") {
			return line
		}
	}
	return ""
}

// checkSplits: no VIP sat on two nodes longer than a handover's overlap.
func checkSplits(t *testing.T, what string, total, longest map[netip.Addr]time.Duration) {
	t.Helper()
	for _, v := range vips {
		d := total[v]
		t.Logf("%s: %s on two nodes for %s in all (longest stretch %s)", what, v, d.Round(time.Millisecond), longest[v].Round(time.Millisecond))
		if d > splitBound {
			t.Errorf("%s: %s sat on two nodes for %s, want at most %s", what, v, d.Round(time.Millisecond), splitBound)
		}
	}
}

// checkNoDuplicates: the split-brain guard of every node saw no other
// host answer for its VIPs and no foreign VRRP speaker.
func checkNoDuplicates(ctx context.Context, t *testing.T, c *kube.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		m, err := c.Metrics(ctx, n.Lab())
		if err != nil {
			continue // no pod on this node
		}
		if d := m.Sum("ipfailover_vip_duplicate", nil); d != 0 {
			t.Errorf("%s: ipfailover_vip_duplicate sums to %v: a VIP on two nodes", n.Name, d)
		}
		if f := m.Sum("ipfailover_vrrp_foreign_adverts_total", nil); f != 0 {
			t.Errorf("%s: %v foreign VRRP adverts", n.Name, f)
		}
	}
}

// waitMetric waits until the pod on n reports metric at value.
func waitMetric(ctx context.Context, t *testing.T, c *kube.Cluster, n *kube.Machine, metric string, value float64) {
	t.Helper()
	var last string
	for {
		m, err := c.Metrics(ctx, n.Lab())
		if err == nil && m.Sum(metric, nil) == value {
			return
		}
		last = fmt.Sprint(err)
		if err == nil {
			last = fmt.Sprint(m.Sum(metric, nil))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s never %v (last %s)", n.Name, metric, value, last)
		case <-time.After(time.Second):
		}
	}
}

// checkPermissions: the pods' ServiceAccount may read and annotate the
// pods of its namespace, and nothing else; the pods mount its token, the
// cleanup Job's would not (deploy_test.go checks the manifests).
func checkPermissions(ctx context.Context, t *testing.T, c *kube.Cluster) {
	t.Helper()
	as := "--as=system:serviceaccount:" + kube.Namespace + ":ipfailover"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "pods", "-n", kube.Namespace}, "yes"},
		{[]string{"list", "pods", "-n", kube.Namespace}, "yes"},
		{[]string{"watch", "pods", "-n", kube.Namespace}, "yes"},
		{[]string{"patch", "pods", "-n", kube.Namespace}, "yes"},
		{[]string{"delete", "pods", "-n", kube.Namespace}, "no"},
		{[]string{"create", "pods", "-n", kube.Namespace}, "no"},
		{[]string{"list", "pods", "-n", "default"}, "no"},
		{[]string{"list", "pods", "--all-namespaces"}, "no"},
		{[]string{"get", "secrets", "-n", kube.Namespace}, "no"},
		{[]string{"get", "configmaps", "-n", kube.Namespace}, "no"},
		{[]string{"list", "nodes"}, "no"},
	} {
		out, _ := c.Kubectl(ctx, append(append([]string{"auth", "can-i"}, tt.args...), as)...)
		if got := strings.TrimSpace(string(out)); got != tt.want {
			t.Errorf("kubectl auth can-i %s as the pods' ServiceAccount: %q, want %q", strings.Join(tt.args, " "), got, tt.want)
		}
	}
}

// serviceBack waits until a TCP connection from every node to the
// kubernetes Service succeeds (kube-proxy has its endpoint again) and
// returns when.
func serviceBack(ctx context.Context, t *testing.T, c *kube.Cluster) time.Time {
	t.Helper()
	addr := netip.AddrPortFrom(kube.KubernetesService, 443).String()
	for _, n := range c.Nodes {
		for {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			conn, err := n.Lab().Dial(dctx, "tcp", addr)
			cancel()
			if err == nil {
				conn.Close()
				break
			}
			if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
				t.Fatalf("the kubernetes Service never answered on %s: %v", n.Name, err)
			}
		}
	}
	return time.Now()
}

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(max(d, 0)):
		return nil
	}
}

// TestTwoDeploymentsSameRouterIDs: two deployments on one network with the
// same router ids, the way two clusters' would be: one on node1 and node2,
// the other, in another namespace with its own VIP and password, on
// node3. With unicast neither hears the other: each holds its own VIPs
// and no node counts a foreign advert. With multicast (the control, so the
// test can fail) the same two do hear each other.
func TestTwoDeploymentsSameRouterIDs(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 15*time.Minute)
	since := time.Now()
	services(t, c)
	const other = "ipfailover-b"
	otherVIP := netip.MustParseAddr("192.0.2.110")
	for _, n := range c.Nodes {
		group := "a"
		if n == c.Nodes[2] {
			group = "b"
		}
		if _, err := c.Kubectl(ctx, "label", "node", n.Name, "--overwrite", "ipfailover-test="+group); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			if _, err := c.Kubectl(context.Background(), "label", "node", n.Name, "ipfailover-test-"); err != nil {
				t.Error(err)
			}
		}
	})
	for _, mode := range []string{"unicast", "multicast"} {
		t.Run(mode, func(t *testing.T) {
			a := overlay("overlays/kubernetes", nil)
			a.Replicas, a.NodeSelector = 2, map[string]string{"ipfailover-test": "a"}
			b := overlay("overlays/kubernetes", map[string]string{"OPENSHIFT_HA_VIRTUAL_IPS": otherVIP.String(), "OPENSHIFT_HA_CONFIG_NAME": "cluster-b"})
			b.Replicas, b.NodeSelector, b.Namespace = 1, map[string]string{"ipfailover-test": "b"}, other
			if mode == "multicast" {
				a.Components = []string{"components/multicast"}
				b.Components = a.Components
			}
			for _, o := range []kube.Overlay{a, b} {
				if err := c.Apply(ctx, o); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { deleteOverlay(t, c, o) })
			}
			for _, ns := range []string{kube.Namespace, other} {
				if _, err := c.Kubectl(ctx, "-n", ns, "rollout", "status", deployment, "--timeout=5m"); err != nil {
					t.Fatal(err)
				}
			}
			all := append(slices.Clone(vips), otherVIP)
			var h lab.HolderMap
			if mode == "unicast" {
				h = settled(ctx, t, c, all)
				t.Logf("%s: holders %s", mode, h)
				for _, v := range vips {
					if h[v] == c.Nodes[2].Lab() {
						t.Errorf("%s: %s, of the deployment on node1 and node2, is on node3", mode, v)
					}
				}
				if h[otherVIP] != c.Nodes[2].Lab() {
					t.Errorf("%s: %s, of the deployment on node3, is on %v", mode, otherVIP, h[otherVIP])
				}
			}
			// Six advert intervals for the adverts to cross, or not.
			if err := sleepCtx(ctx, 6*advert); err != nil {
				t.Fatal(err)
			}
			var foreign float64
			for _, n := range c.Nodes {
				m, err := c.Metrics(ctx, n.Lab())
				if err != nil {
					t.Fatal(err)
				}
				f := m.Sum("ipfailover_vrrp_foreign_adverts_total", nil)
				auth := m.Sum("keepalived_vrrp_auth_failure", nil) + m.Sum("keepalived_vrrp_addr_list_err", nil)
				t.Logf("%s: %s counts %v foreign adverts, %v authentication and address list errors", mode, n.Name, f, auth)
				foreign += f + auth
			}
			switch {
			case mode == "unicast" && foreign != 0:
				t.Errorf("unicast: the two deployments heard each other (%v foreign adverts and errors)", foreign)
			case mode == "multicast" && foreign == 0:
				t.Errorf("multicast: the two deployments did not hear each other: the measurement cannot tell")
			}
			if mode == "unicast" {
				if final := settled(ctx, t, c, all); final.String() != h.String() {
					t.Errorf("%s: the holders moved: %s, then %s", mode, h, final)
				}
			} else if hs, err := c.Lab().HoldersOf(all); err == nil {
				// With multicast the two elect across deployments: no
				// settled holders to expect.
				for _, v := range all {
					var names []string
					for _, n := range hs[v] {
						names = append(names, n.Name)
					}
					t.Logf("multicast: %s on %v", v, names)
				}
			}
			for _, o := range []kube.Overlay{b, a} {
				deleteOverlay(t, c, o)
			}
		})
	}
	checkEvents(ctx, t, c, since)
}

// TestMigrationToUnicast: a multicast deployment (components/multicast)
// moved to the manifests' unicast mode by the ordinary rolling update,
// the multicast bridge keeping the two VRRP domains from both holding a
// VIP: the longest gap per VIP and the time any VIP sits on two nodes
// stay within the second, over the whole migration.
func TestMigrationToUnicast(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 15*time.Minute)
	since := time.Now()
	services(t, c)
	mc := overlay("overlays/kubernetes", nil)
	mc.Components = []string{"components/multicast"}
	if err := c.Apply(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, mc) })
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
	t.Logf("multicast: holders %s", settled(ctx, t, c, vips))

	var total, longest map[netip.Addr]time.Duration
	bridged := map[string]bool{}
	gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
		m := c.Lab().MeterSplits(vips, probeEvery, func(h lab.HolderMap) { t.Logf("holders %s", h) })
		defer func() { total, longest = m.Stop() }()
		if err := c.Apply(ctx, overlay("overlays/kubernetes", nil)); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- c.RolloutStatus(ctx, deployment) }()
		for {
			// Which new pods relay to the multicast ones, as it happens.
			for _, n := range c.Nodes {
				if m, err := c.Metrics(ctx, n.Lab()); err == nil && m.Sum("ipfailover_multicast_bridge_active", nil) == 1 {
					bridged[n.Name] = true
				}
			}
			select {
			case err := <-done:
				if err != nil {
					return err
				}
				_, err = c.Holders(ctx, vips, quiet)
				return err
			case <-time.After(200 * time.Millisecond):
			}
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkGaps(t, "the migration to unicast", gaps)
	checkSplits(t, "the migration to unicast", total, longest)
	if len(bridged) == 0 {
		t.Error("no new pod ever relayed to the multicast pods")
	}
	t.Logf("the bridge relayed on %v", bridged)
	pods := podsReady(ctx, t, c)
	checkListed(ctx, t, c, pods)
	for _, n := range c.Nodes {
		waitMetric(ctx, t, c, n, "ipfailover_multicast_bridge_active", 0)
	}
	for _, p := range pods {
		if !bytes.Contains(logsOf(ctx, t, c, p.Name), []byte("multicast bridge")) {
			t.Logf("%s never relayed (it came up after the last multicast pod)", p.Name)
		}
	}
	checkNoDuplicates(ctx, t, c)
	checkEvents(ctx, t, c, since)
}
