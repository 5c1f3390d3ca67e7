package kubee2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The cases of the pods' agreement on VRRP: rolling updates that change
// what a pod speaks, with a client probing every VIP every probeEvery and
// every node's addresses read as often. Each reports, per VIP, the longest
// time without an answer and the time it sat on two nodes, which must stay
// within handoverBound and splitBound.

// pinned is the interval the pinning rollout sets.
const pinned = "0.5"

// keepLogs copies the workload's pods' logs, every container's, into the
// cluster's directory until the test ends (the kubelet deletes a pod's
// logs with the pod), and names the directory when the test failed.
func keepLogs(t *testing.T, c *kube.Cluster) {
	dir := filepath.Join(c.State().Dir, "logs", strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	stop := c.KeepPodLogs(dir, kube.Namespace, 200*time.Millisecond)
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("the pods' logs are in %s", dir)
		}
	})
}

// rolloutMeasure is what a client and the nodes' addresses saw of one
// rolling update.
type rolloutMeasure struct {
	gaps           []kube.Gap
	total, longest map[netip.Addr]time.Duration
	seen           []rolloutState
}

// check holds a measure to the bounds and logs it.
func (m rolloutMeasure) check(t *testing.T, what string) {
	t.Helper()
	checkGaps(t, what, m.gaps)
	checkSplits(t, what, m.total, m.longest)
	var log []string
	for _, s := range m.seen {
		log = append(log, s.String())
	}
	t.Logf("%s, as the pods' readiness showed it:\n%s", what, strings.Join(log, "\n"))
}

// measureRollout runs change, a rolling update of the Deployment, then
// during (nil: nothing) while it goes on, and waits for the rollout to end
// and the holders to settle, while the client probes and the addresses
// are read.
func measureRollout(ctx context.Context, t *testing.T, c *kube.Cluster, change, during func() error) rolloutMeasure {
	t.Helper()
	var m rolloutMeasure
	gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
		meter := c.Lab().MeterSplits(vips, probeEvery, func(h lab.HolderMap) { t.Logf("holders %s", h) })
		defer func() { m.total, m.longest = meter.Stop() }()
		stop := watchRollout(ctx, c, &m.seen)
		defer stop()
		if err := change(); err != nil {
			return err
		}
		if during != nil {
			if err := during(); err != nil {
				return err
			}
		}
		if err := c.RolloutStatus(ctx, deployment); err != nil {
			return err
		}
		_, err := c.Holders(ctx, vips, quiet)
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.gaps = gaps
	return m
}

// setEnv changes the Deployment's environment as `kubectl set env` does:
// "NAME=value" sets, "NAME-" removes.
func setEnv(ctx context.Context, c *kube.Cluster, change string) error {
	_, err := c.Kubectl(ctx, "-n", kube.Namespace, "set", "env", deployment, change)
	return err
}

// TestPinnedInterval: a rolling update that pins OPENSHIFT_HA_ADVERT_INTERVAL
// at 0.5 s, and one that removes the pin. The pods at 0.2 s and at 0.5 s
// speak VRRPv3 and hear each other throughout: no VIP on two nodes, no gap
// longer than a handover; the workload ends on the interval it was given.
func TestPinnedInterval(t *testing.T) {
	c := need(t)
	keepLogs(t, c)
	ctx := testContext(t, 10*time.Minute)
	since := time.Now()
	services(t, c)
	o := overlay("overlays/kubernetes", nil)
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, o) })
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
	settled(ctx, t, c, vips)

	m := measureRollout(ctx, t, c, func() error { return setEnv(ctx, c, "OPENSHIFT_HA_ADVERT_INTERVAL="+pinned) }, nil)
	m.check(t, "pinning the interval at "+pinned+" s")
	checkNodeByNode(t, m.seen)
	for metric, want := range map[string]float64{"ipfailover_advert_interval_seconds": 0.5, "ipfailover_vrrp_version": 3} {
		if err := everyNode(ctx, c, metric, want); err != nil {
			t.Fatal(err)
		}
	}

	m = measureRollout(ctx, t, c, func() error { return setEnv(ctx, c, "OPENSHIFT_HA_ADVERT_INTERVAL-") }, nil)
	m.check(t, "removing the pin")
	checkNodeByNode(t, m.seen)
	for metric, want := range map[string]float64{"ipfailover_advert_interval_seconds": fastAdvert.Seconds(), "ipfailover_vrrp_version": 3} {
		if err := everyNode(ctx, c, metric, want); err != nil {
			t.Fatal(err)
		}
	}
	checkNoDuplicates(ctx, t, c)
	checkEvents(ctx, t, c, since)
}

// olderImage is the image of an older commit that the upgrade cases roll
// from and back to (make kube-test builds it: OLD_IMAGE), "" when the
// cluster has none.
func olderImage() string { return os.Getenv("IPFAILOVER_OLD_IMAGE") }

// needOlder returns the older image, or skips the test.
func needOlder(t *testing.T, c *kube.Cluster) string {
	t.Helper()
	old := olderImage()
	if old == "" {
		t.Skip("IPFAILOVER_OLD_IMAGE names no older image (make kube-test builds one and sets it)")
	}
	for _, ref := range c.State().Images {
		if ref == old {
			return old
		}
	}
	t.Fatalf("the cluster has no image %s (images %v): kubelab up -image %s", old, c.State().Images, old)
	return ""
}

// TestOlderImageRollout: a rolling update from an image that speaks VRRPv2
// with unicast peers (an older commit's), and the rollback to it. The new
// pods speak VRRPv3 and bridge the old ones; neither direction leaves a VIP
// on two nodes or unanswered longer than a handover.
func TestOlderImageRollout(t *testing.T) {
	c := need(t)
	old := needOlder(t, c)
	upgradeAndBack(t, c, old, nil)
}

// TestOlderImageRolloutCutOff: the same with node3's pod unable to reach
// the API server for the whole rollout (its segment intact): the pod that
// cannot see the others change changes nothing by itself, and what it
// hears on the wire keeps one holder per VIP. Node3 goes last (a
// pod-deletion cost); the cut is lifted once its new pod is the only one
// left, so that the rollout can end.
func TestOlderImageRolloutCutOff(t *testing.T) {
	c := need(t)
	old := needOlder(t, c)
	upgradeAndBack(t, c, old, c.Nodes[len(c.Nodes)-1])
}

// cutHold is how long a cut-off node's new pod stays without the API server
// once it is the rollout's last: it cannot start before, and the rest of
// the workload runs on meanwhile.
const cutHold = 20 * time.Second

// upgradeAndBack rolls the workload from old to this image and back, each
// measured, with cut (nil: none) cut off from the API server during each.
func upgradeAndBack(t *testing.T, c *kube.Cluster, old string, cut *kube.Machine) {
	keepLogs(t, c)
	ctx := testContext(t, 15*time.Minute)
	since := time.Now()
	services(t, c)
	from := overlay("overlays/kubernetes", nil)
	from.Image = old
	if err := c.Apply(ctx, from); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, from) })
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
	t.Logf("%s: holders %s", old, settled(ctx, t, c, vips))

	to := overlay("overlays/kubernetes", nil)
	for _, step := range []struct {
		what   string
		change func() error
		// toThis says that the step rolls to this image: its last pod,
		// on the cut-off node, waits for the API server cutHold more.
		toThis bool
	}{
		{"the rolling update from " + old, func() error { return c.Apply(ctx, to) }, true},
		{"the rollback to " + old, func() error {
			_, err := c.Kubectl(ctx, "-n", kube.Namespace, "rollout", "undo", deployment)
			return err
		}, false},
	} {
		var during func() error
		if cut != nil {
			lift := cutOff(ctx, t, c, cut)
			during = func() error {
				// The cut-off node's pod is the rollout's last: every
				// other node runs the new template. A pod of this image
				// waits for the API server, alive; the older image
				// cannot answer the kubelet's liveness probe meanwhile,
				// so its wait is not drawn out.
				err := waitLastPod(ctx, c, cut.Name)
				if err == nil && step.toThis {
					err = sleepCtx(ctx, cutHold)
				}
				lift()
				return err
			}
		}
		m := measureRollout(ctx, t, c, step.change, during)
		m.check(t, step.what)
		checkNodeByNode(t, m.seen)
	}
	if cut == nil {
		checkNoDuplicates(ctx, t, c)
	} else {
		// The cut-off pod lists the older pods as peers until it hears
		// them speak VRRPv2, and the older image counts its VRRPv3
		// adverts meanwhile as a foreign speaker's.
		for _, n := range c.Nodes {
			if m, err := c.Metrics(ctx, n.Lab()); err == nil {
				if d := m.Sum("ipfailover_vip_duplicate", nil); d != 0 {
					t.Errorf("%s: ipfailover_vip_duplicate sums to %v: a VIP on two nodes", n.Name, d)
				}
				t.Logf("%s: %v adverts its guard took for foreign", n.Name, m.Sum("ipfailover_vrrp_foreign_adverts_total", nil))
			}
		}
	}
	checkEvents(ctx, t, c, since)
}

// cutOff keeps the ipfailover pod on n from the API server: its
// connections to the kubernetes Service are refused in n's network
// namespace (the pod's, host network), and the kubelet, which reaches the
// API server at its own address, goes on. The pod on n is deleted last in
// a rollout. The returned function lifts the cut (it runs at the test's
// end too).
func cutOff(ctx context.Context, t *testing.T, c *kube.Cluster, n *kube.Machine) (lift func()) {
	t.Helper()
	pods, err := c.Pods(ctx, podLabel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil {
			if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "annotate", "--overwrite", "pod", p.Name, "controller.kubernetes.io/pod-deletion-cost=1000"); err != nil {
				t.Fatal(err)
			}
		}
	}
	svc, err := c.Kubectl(ctx, "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}")
	if err != nil {
		t.Fatal(err)
	}
	addr, port, ok := strings.Cut(string(svc), ":")
	if !ok {
		t.Fatalf("the kubernetes Service is at %q", svc)
	}
	rule := []string{"OUTPUT", "-p", "tcp", "-m", "conntrack", "--ctorigdst", addr, "--ctorigdstport", port, "-j", "REJECT", "--reject-with", "tcp-reset"}
	if out, err := n.Lab().Exec(ctx, append([]string{"iptables", "-I"}, rule...)...); err != nil {
		t.Fatalf("cutting %s off the API server: %v: %s", n.Name, err, out)
	}
	t.Logf("%s cut off from the API server (%s)", n.Name, svc)
	lifted := false
	lift = func() {
		if lifted {
			return
		}
		lifted = true
		if out, err := n.Lab().Exec(context.WithoutCancel(ctx), append([]string{"iptables", "-D"}, rule...)...); err != nil {
			t.Errorf("lifting %s's cut: %v: %s", n.Name, err, out)
		}
		t.Logf("%s reaches the API server again", n.Name)
	}
	t.Cleanup(lift)
	return lift
}

// waitLastPod waits until every node but node runs a Ready pod of the
// newest template and node's pod is of it too, not Ready.
func waitLastPod(ctx context.Context, c *kube.Cluster, node string) error {
	for {
		pods, err := c.Pods(ctx, podLabel)
		if err == nil && lastOnly(pods, node) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s's pod to be the rollout's last: %w", node, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lastOnly says whether pods are one rollout's end but for node's pod:
// every pod of one template, Ready but on node.
func lastOnly(pods []corev1.Pod, node string) bool {
	hash := ""
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			return false
		}
		h := p.Labels["pod-template-hash"]
		if hash == "" {
			hash = h
		}
		if h != hash || kube.Ready(p) == (p.Spec.NodeName == node) {
			return false
		}
	}
	return hash != "" && len(pods) > 1
}

// stuckFor is how long TestStuckNewPod keeps a new pod that cannot start.
const stuckFor = 5 * time.Minute

// stuckImage is an image no node has, whose pull fails: it names no
// registry this cluster reaches.
const stuckImage = "ipfailover-stuck:missing"

// TestStuckNewPod: a rolling update to an image that cannot be pulled. The
// Deployment stops one old pod and its replacement sits in
// ImagePullBackOff for stuckFor while the other pods run on: a pod of
// another template that publishes nothing changes nothing by itself, the
// running pods stay at the fast interval, and no VIP is held twice or
// unanswered longer than a handover. Rolled back, the workload ends where
// it began.
func TestStuckNewPod(t *testing.T) {
	c := need(t)
	keepLogs(t, c)
	ctx := testContext(t, stuckFor+10*time.Minute)
	services(t, c)
	o := overlay("overlays/kubernetes", nil)
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, o) })
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
	settled(ctx, t, c, vips)

	var total, longest map[netip.Addr]time.Duration
	var stuck string
	gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
		m := c.Lab().MeterSplits(vips, probeEvery, func(h lab.HolderMap) { t.Logf("holders %s", h) })
		defer func() { total, longest = m.Stop() }()
		patch := fmt.Sprintf(`[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": %q},`+
			`{"op": "replace", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "IfNotPresent"}]`, stuckImage)
		if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "patch", deployment, "--type", "json", "-p", patch); err != nil {
			return err
		}
		var err error
		if stuck, err = waitPullBackOff(ctx, c); err != nil {
			return err
		}
		t.Logf("%s cannot pull %s; the other pods run on for %s", stuck, stuckImage, stuckFor)
		end := time.Now().Add(stuckFor)
		for time.Now().Before(end) {
			for metric, want := range map[string]float64{"ipfailover_advert_interval_seconds": fastAdvert.Seconds(), "ipfailover_vrrp_version": 3} {
				for _, n := range c.Nodes {
					if mt, err := c.Metrics(ctx, n.Lab()); err == nil && mt.Sum(metric, nil) != want {
						return fmt.Errorf("%s: %s is %v while %s is stuck, want %v", n.Name, metric, mt.Sum(metric, nil), stuck, want)
					}
				}
			}
			if err := sleepCtx(ctx, 10*time.Second); err != nil {
				return err
			}
		}
		if _, err := waitPullBackOff(ctx, c); err != nil {
			return fmt.Errorf("after %s: %w", stuckFor, err)
		}
		_, err = c.Holders(ctx, vips, quiet)
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkGaps(t, "a new pod stuck for "+stuckFor.String(), gaps)
	checkSplits(t, "a new pod stuck for "+stuckFor.String(), total, longest)

	m := measureRollout(ctx, t, c, func() error {
		_, err := c.Kubectl(ctx, "-n", kube.Namespace, "rollout", "undo", deployment)
		return err
	}, nil)
	m.check(t, "the rollback from the stuck rollout")
	podsReady(ctx, t, c)
	for metric, want := range map[string]float64{"ipfailover_advert_interval_seconds": fastAdvert.Seconds(), "ipfailover_vrrp_version": 3, "ipfailover_multicast_bridge_active": 0} {
		if err := everyNode(ctx, c, metric, want); err != nil {
			t.Fatal(err)
		}
	}
	checkNoDuplicates(ctx, t, c)
}

// waitPullBackOff waits for a pod of the workload whose container waits
// for an image it cannot pull, and names it.
func waitPullBackOff(ctx context.Context, c *kube.Cluster) (string, error) {
	for {
		pods, err := c.Pods(ctx, podLabel)
		if err == nil {
			for _, p := range pods {
				for _, s := range p.Status.ContainerStatuses {
					if w := s.State.Waiting; w != nil && (w.Reason == "ImagePullBackOff" || w.Reason == "ErrImagePull") {
						return p.Name, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no pod waits for %s: %w", stuckImage, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
