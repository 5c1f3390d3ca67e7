package kubee2e

import (
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/kube"
)

const daemonSet = "daemonset/ipfailover"

// TestDaemonSet applies overlays/daemonset as docs/installation.md tells a
// plain-Kubernetes user: one pod on every node, rolled out node by node.
func TestDaemonSet(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 10*time.Minute)
	since := time.Now()
	services(t, c)
	o := overlay("overlays/daemonset", nil)
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, o) })
	if err := c.RolloutStatus(ctx, daemonSet); err != nil {
		t.Fatal(err)
	}

	t.Run("ready, one pod per node, one holder per VIP", func(t *testing.T) {
		pods := podsReady(ctx, t, c)
		t.Logf("holders: %s", settled(ctx, t, c, vips))
		checkSecurity(ctx, t, c, pods)
		checkLogs(ctx, t, c, pods)
	})

	t.Run("rollout restart", func(t *testing.T) {
		var seen []rolloutState
		gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
			stop := watchRollout(ctx, c, &seen)
			defer stop()
			return c.RolloutRestart(ctx, daemonSet)
		}, func() error {
			_, err := c.Holders(ctx, vips, quiet)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		checkGaps(t, "rollout restart of the DaemonSet", gaps)
		checkNodeByNode(t, seen)
	})

	t.Run("delete a holder's pod", func(t *testing.T) {
		node := settled(ctx, t, c, vips)[vips[0]].Name
		p := podOn(t, podsReady(ctx, t, c), node)
		gaps, err := c.ProbeDuring(ctx, targets(vips), probeEvery, func() error {
			if err := c.DeletePod(ctx, p.Name); err != nil {
				return err
			}
			podsReady(ctx, t, c)
			return nil
		}, func() error {
			_, err := c.Holders(ctx, vips, quiet)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		checkGaps(t, "kubectl delete pod on "+node, gaps)
	})

	t.Run("cleanup Job", func(t *testing.T) {
		if _, err := c.Kubectl(ctx, "-n", "ipfailover", "delete", daemonSet, "--wait=true"); err != nil {
			t.Fatal(err)
		}
		waitNoPods(ctx, t, c, podLabel)
		runCleanup(ctx, t, c, "cleanup/kubernetes", vips)
	})

	checkEvents(ctx, t, c, since)
}

// checkGaps fails on a VIP unanswered longer than handoverBound.
func checkGaps(t *testing.T, what string, gaps []kube.Gap) {
	t.Helper()
	for i, g := range gaps {
		t.Logf("%s: %s longest gap %s", what, vips[i], g)
		if g.Longest > handoverBound {
			t.Errorf("%s: %s unanswered for %s, want at most %s", what, vips[i], g, handoverBound)
		}
	}
}
