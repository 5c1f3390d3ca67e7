package bench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The membership rows: the manifests' default mode, unicast with the
// workload's other pods as peers (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods),
// as pods join and leave, and a multicast deployment migrated to it.
const (
	rowKubeJoinReload   = "kube: a pod joins: its address published → every other keepalived reloaded"
	rowKubeLeaveReload  = "kube: a pod leaves: its keepalived stopped → every other keepalived reloaded without it, less the hold"
	rowKubeJoinGap      = "kube: a pod joins (scale 2 → 3): longest gap per VIP"
	rowKubeJoinTwice    = "kube: a pod joins (scale 2 → 3): VIP on 2 nodes, total per VIP"
	rowKubeLeaveGap     = "kube: a pod leaves (scale 3 → 2): longest gap per VIP"
	rowKubeLeaveTwice   = "kube: a pod leaves (scale 3 → 2): VIP on 2 nodes, total per VIP"
	rowKubeMigrateGap   = "kube: migration multicast → peers from the pods, rolling update with the bridge: longest gap per VIP"
	rowKubeMigrateTwice = "kube: migration multicast → peers from the pods, rolling update with the bridge: VIP on 2 nodes, total per VIP"
	rowKubeRSSPods      = "kube: entrypoint RSS at rest, peers from the pods (the informer)"
	rowKubeRSSMulticast = "kube: entrypoint RSS at rest, multicast (components/multicast), the same binary"
	// targetReload is the goal for a membership change reaching
	// every other keepalived (OpenShift's poll: 20-30 s;
	// keepalived-operator's: 5 s).
	targetReload = 1.0
	podSelector  = "ipfailover=ipfailover"
	deployment   = "deployment/ipfailover"
)

// membership scales the Deployment of three pods down to two and back
// up: from the leaving pod's keepalived stopping and from the joining
// pod's publication to every other keepalived's reload for it (the pods'
// logs: one clock), and the VIPs under the probes.
func (k *kubeRun) membership(ctx context.Context) error {
	all := len(k.c.Nodes)
	began := time.Now()
	before, err := k.pods(ctx, all)
	if err != nil {
		return err
	}
	// A leaving pod's log goes with it: follow them all from now.
	follow := k.c.FollowLogs(ctx, kube.Namespace, before)
	_, after, err := k.scale(ctx, all, all-1, rowKubeLeaveGap, rowKubeLeaveTwice)
	if err != nil {
		return err
	}
	left := notIn(before, after)
	if len(left) != 1 {
		return fmt.Errorf("%d pods left, want one", len(left))
	}
	stopped := kube.LogTimes(follow(left[0].Name), "keepalived stopped")
	if len(stopped) == 0 {
		return fmt.Errorf("%s left without logging that its keepalived stopped", left[0].Name)
	}
	// Its address is held for membership.PeerHold, then dropped: the
	// join below must not come back with it before.
	if err := k.reloaded(ctx, rowKubeLeaveReload, left[0], stopped[len(stopped)-1], after, "removed", began, membership.PeerHold); err != nil {
		return err
	}

	began = time.Now()
	before, after, err = k.scale(ctx, all-1, all, rowKubeJoinGap, rowKubeJoinTwice)
	if err != nil {
		return err
	}
	joined := notIn(after, before)
	if len(joined) != 1 {
		return fmt.Errorf("%d pods joined, want one", len(joined))
	}
	logs, err := k.c.Kubectl(ctx, "-n", kube.Namespace, "logs", joined[0].Name)
	if err != nil {
		return err
	}
	published := kube.LogTimes(logs, "published this pod's unicast address")
	if len(published) == 0 {
		return fmt.Errorf("%s never published its address", joined[0].Name)
	}
	return k.reloaded(ctx, rowKubeJoinReload, joined[0], published[0], before, "added", began, 0)
}

// reloaded adds to row the time from at (subject's line) to the last of
// others' keepalived reloaded with subject's address added or removed,
// less hold (the time the others keep a left pod's address on purpose),
// waiting for the reloads for hold and kubeQuiet more.
func (k *kubeRun) reloaded(ctx context.Context, row string, subject corev1.Pod, at time.Time, others []corev1.Pod, change string, since time.Time, hold time.Duration) error {
	n := k.c.Node(subject.Spec.NodeName)
	if n == nil {
		return fmt.Errorf("%s runs on %q, no node of the cluster", subject.Name, subject.Spec.NodeName)
	}
	reloads, err := k.c.WaitReloads(ctx, kube.Namespace, others, n.Lab().Addr4, change, since, hold+kubeQuiet)
	if err != nil {
		return err
	}
	var last time.Duration
	for _, o := range others {
		ts := reloads[o.Name]
		if len(ts) == 0 {
			return fmt.Errorf("%s: %s never reloaded keepalived with %s %s", row, o.Name, n.Lab().Addr4, change)
		}
		d := ts[0].Sub(at)
		// A joining pod logs its publication once the API server's answer
		// is back, which the others' watches can beat: below 0 is within
		// the patch's round trip. A reload before a leaving pod's
		// keepalived stopped would be a fault.
		if d < 0 && change == "removed" {
			k.r.note("%s: %s reloaded with %s %s %s before %s's line", row, o.Name, n.Lab().Addr4, change, -d, subject.Name)
		}
		last = max(last, d-hold)
	}
	k.r.add(row, Sample{Value: last})
	k.r.o.Log.Info(row, "pod", subject.Name, "every_other_reloaded_after", last.Round(time.Millisecond))
	return nil
}

// migrate replaces the Deployment by the same in multicast
// (components/multicast) and applies the default overlay again, under the
// probes and the split meter: the ordinary rolling update, the new pods'
// multicast bridge keeping the two VRRP domains from both holding a VIP.
func (k *kubeRun) migrate(ctx context.Context) error {
	mc := k.overlay("overlays/kubernetes")
	mc.Components = []string{"components/multicast"}
	if err := k.c.Apply(ctx, mc); err != nil {
		return err
	}
	if err := k.c.RolloutStatus(ctx, deployment); err != nil {
		return err
	}
	if _, err := k.pods(ctx, len(k.c.Nodes)); err != nil {
		return err
	}
	if _, err := k.c.Holders(ctx, k.vips, kubeQuiet); err != nil {
		return err
	}
	if err := k.entrypointRSS(rowKubeRSSMulticast); err != nil {
		return err
	}
	var total map[netip.Addr]time.Duration
	err := k.gaps(ctx, rowKubeMigrateGap, func() error {
		m := k.c.Lab().MeterSplits(k.vips, k.r.o.Poll, func(h lab.HolderMap) { k.r.o.Log.Debug("holders", "holders", h.String()) })
		defer func() { total, _ = m.Stop() }()
		if err := k.c.Apply(ctx, k.overlay("overlays/kubernetes")); err != nil {
			return err
		}
		if err := k.c.RolloutStatus(ctx, deployment); err != nil {
			return err
		}
		if _, err := k.pods(ctx, len(k.c.Nodes)); err != nil {
			return err
		}
		_, err := k.c.Holders(ctx, k.vips, kubeQuiet)
		return err
	})
	if err != nil {
		return err
	}
	for _, v := range k.vips {
		k.r.add(rowKubeMigrateTwice, Sample{Value: total[v]})
		k.r.o.Log.Info(rowKubeMigrateTwice, "vip", v, "on_two_nodes", total[v].Round(time.Millisecond))
	}
	return nil
}

// entrypointRSS adds every node's ipfailover process's resident memory
// to row.
func (k *kubeRun) entrypointRSS(row string) error {
	for _, n := range k.c.Nodes {
		rss, err := n.ProgramRSS("ipfailover")
		if err != nil {
			return err
		}
		if rss == 0 {
			return fmt.Errorf("%s: no ipfailover process on %s", row, n.Name)
		}
		k.r.addSize(row, rss)
	}
	return nil
}

// scale changes the Deployment's replicas from from to to under the
// probes and the split meter, and adds the longest gap and the time on two
// nodes per VIP to the rows.
func (k *kubeRun) scale(ctx context.Context, from, to int, gapRow, twiceRow string) (before, after []corev1.Pod, err error) {
	if before, err = k.pods(ctx, from); err != nil {
		return nil, nil, err
	}
	var total map[netip.Addr]time.Duration
	err = k.gaps(ctx, gapRow, func() error {
		m := k.c.Lab().MeterSplits(k.vips, k.r.o.Poll, func(h lab.HolderMap) { k.r.o.Log.Debug("holders", "holders", h.String()) })
		defer func() { total, _ = m.Stop() }()
		if _, err := k.c.Kubectl(ctx, "-n", kube.Namespace, "scale", deployment, fmt.Sprintf("--replicas=%d", to)); err != nil {
			return err
		}
		if after, err = k.pods(ctx, to); err != nil {
			return err
		}
		_, err := k.c.Holders(ctx, k.vips, kubeQuiet)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	for _, v := range k.vips {
		k.r.add(twiceRow, Sample{Value: total[v]})
	}
	return before, after, nil
}

// pods waits until n ipfailover pods are Ready on n nodes and no other is
// left, and returns them.
func (k *kubeRun) pods(ctx context.Context, n int) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		pods, err := k.c.Pods(ctx, podSelector)
		if err != nil {
			return nil, err
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && kube.Ready(p) {
				nodes[p.Spec.NodeName] = true
			}
		}
		if len(nodes) == n && len(pods) == n {
			return pods, nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, fmt.Errorf("waiting for %d Ready pods: %w", n, err)
		}
	}
}

// notIn are the pods of a that are not in b.
func notIn(a, b []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range a {
		if !slices.ContainsFunc(b, func(q corev1.Pod) bool { return q.Name == p.Name }) {
			out = append(out, p)
		}
	}
	return out
}

// membershipRows are the rows of the peers from the pods, with the
// issue's goals on the worst.
func (r *runner) membershipRows(t func(name, rule, shipped string) *Row, size func(name string, u Unit, shipped string) *Row) {
	probe := fmt.Sprintf("a client connects to every VIP every %s; until the holders settle again", kubeProbe)
	split := fmt.Sprintf("by netlink dumps of every node every %s", r.o.Poll)
	row := t(rowKubeJoinReload, "", "")
	row.Note = "from the new pod's log line (its annotation patched, logged when the API server's answer is back) to the last other pod's \"reloaded keepalived\" with its address added; 0 when every other reloaded before that line; OpenShift's unicast peers: 20-30 s, keepalived-operator: 5 s"
	row.Check("worst", targetReload)
	row = t(rowKubeLeaveReload, "", "")
	row.Note = fmt.Sprintf("from the leaving pod's \"keepalived stopped\" (its priority-0 adverts sent; it stays a peer while it terminates, until its containers have ended) to the last other pod's reload without its address, less the %s the others hold a left pod's address (membership.PeerHold)", membership.PeerHold)
	row.Check("worst", targetReload)
	for _, name := range []string{rowKubeJoinGap, rowKubeLeaveGap} {
		row := t(name, "", "")
		row.Note = probe
		row.Check("worst", targetRolling)
	}
	for _, name := range []string{rowKubeJoinTwice, rowKubeLeaveTwice} {
		t(name, "", "").Note = split
	}
	row = t(rowKubeMigrateGap, "", "")
	row.Note = "components/multicast, then the default overlay applied: the ordinary rolling update; " + probe
	row.Check("worst", targetMigrateGap)
	row = t(rowKubeMigrateTwice, "", "")
	row.Note = split + ", over the whole rolling update"
	row.Check("worst", targetMigrateTwice)
	size(rowKubeRSSPods, MB, "").Note = "VmRSS of each pod's ipfailover process (keepalived apart), the Deployment settled"
	size(rowKubeRSSMulticast, MB, "").Note = "the same before the migration: no API client"
}
