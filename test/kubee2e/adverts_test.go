package kubee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// olderPod is the stand-in of a pod of an older image: the workload's
// labels with a revision of its own, publishing an address alone (no
// membership.FastAnnotation nor membership.AdvertsAnnotation), on a node.
// It runs the pause image: no keepalived answers from the address, which
// is outside the lab.
const olderPod = "ipfailover-older"

// olderAddr is what olderPod publishes.
var olderAddr = netip.MustParseAddr("203.0.113.250")

// TestOlderPodBridged: at the manifests' defaults every pod speaks VRRPv3
// at config.FastAdvertInterval. A pod that publishes its address alone (an
// older image, VRRPv2) changes nothing of that: every pod counts it as a
// VRRPv2 pod within reloadBound, bridged, not a peer of keepalived, and
// forgets it when it goes; no VIP is unanswered longer than a handover or
// on two nodes longer than splitBound, and no node counts a foreign
// advert.
func TestOlderPodBridged(t *testing.T) {
	c := need(t)
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
	pods := podsReady(ctx, t, c)
	settled(ctx, t, c, vips)
	fast := config.FastAdvertInterval.Seconds()
	for metric, want := range map[string]float64{"ipfailover_advert_interval_seconds": fast, "ipfailover_vrrp_version": 3, "ipfailover_membership_vrrp2_pods": 0} {
		if err := everyNode(ctx, c, metric, want); err != nil {
			t.Fatal(err)
		}
	}
	confs := func() map[string]string {
		out := map[string]string{}
		for _, p := range pods {
			b, err := c.Kubectl(ctx, "-n", kube.Namespace, "exec", p.Name, "--", "cat", "/etc/keepalived/keepalived.conf")
			if err != nil {
				t.Fatal(err)
			}
			out[p.Name] = string(b)
		}
		return out
	}
	before := confs()

	labels := maps.Clone(pods[0].Labels)
	labels["pod-template-hash"] = "older"
	manifest, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": olderPod, "namespace": kube.Namespace, "labels": labels,
			"annotations": map[string]string{membership.Annotation: olderAddr.String()}},
		"spec": map[string]any{
			"nodeName":                      pods[0].Spec.NodeName,
			"hostNetwork":                   true,
			"terminationGracePeriodSeconds": 0,
			"containers":                    []map[string]any{{"name": "pause", "image": "localhost/kube-pause:3.10.2"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var bridgedIn, forgottenIn time.Duration
	var total, longest map[netip.Addr]time.Duration
	gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
		m := c.Lab().MeterSplits(vips, probeEvery, func(h lab.HolderMap) { t.Logf("holders %s", h) })
		defer func() { total, longest = m.Stop() }()
		began := time.Now()
		if _, err := c.KubectlInput(ctx, manifest, "apply", "-f", "-"); err != nil {
			return err
		}
		if err := everyNode(ctx, c, "ipfailover_membership_vrrp2_pods", 1); err != nil {
			return err
		}
		bridgedIn = time.Since(began)
		for metric, want := range map[string]float64{"ipfailover_multicast_bridge_active": 1, "ipfailover_advert_interval_seconds": fast, "ipfailover_vrrp_version": 3} {
			if err := everyNode(ctx, c, metric, want); err != nil {
				return err
			}
		}
		if _, err := c.Holders(ctx, vips, quiet); err != nil {
			return err
		}
		began = time.Now()
		if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "delete", "pod", olderPod, "--wait=false"); err != nil {
			return err
		}
		if err := everyNode(ctx, c, "ipfailover_membership_vrrp2_pods", 0); err != nil {
			return err
		}
		forgottenIn = time.Since(began)
		if err := everyNode(ctx, c, "ipfailover_multicast_bridge_active", 0); err != nil {
			return err
		}
		_, err := c.Holders(ctx, vips, quiet)
		return err
	}, nil)
	t.Cleanup(func() {
		if _, err := c.Kubectl(context.Background(), "-n", kube.Namespace, "delete", "pod", olderPod, "--ignore-not-found", "--wait=false"); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every pod bridged the older pod %s after it was created, and forgot it %s after it was deleted", bridgedIn.Round(time.Millisecond), forgottenIn.Round(time.Millisecond))
	for _, d := range []time.Duration{bridgedIn, forgottenIn} {
		if d > reloadBound {
			t.Errorf("the pods followed the older pod in %s, want at most %s", d.Round(time.Millisecond), reloadBound)
		}
	}
	// Not a peer of keepalived: its configuration never changed.
	if diff := cmp.Diff(before, confs()); diff != "" {
		t.Errorf("keepalived.conf changed for a VRRPv2 pod (-before +after):\n%s", diff)
	}
	checkGaps(t, "an older pod", gaps)
	checkSplits(t, "an older pod", total, longest)
	checkNoDuplicates(ctx, t, c)
	checkEvents(ctx, t, c, since)
}

// everyNode waits until the pod on every node reports metric at value,
// reading them every 50 ms.
func everyNode(ctx context.Context, c *kube.Cluster, metric string, value float64) error {
	for _, n := range c.Nodes {
		var last string
		for {
			m, err := c.Metrics(ctx, n.Lab())
			if err == nil && m.Sum(metric, nil) == value {
				break
			}
			last = fmt.Sprint(err)
			if err == nil {
				last = fmt.Sprint(m.Sum(metric, nil))
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %s never %v (last %s)", n.Name, metric, value, last)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
