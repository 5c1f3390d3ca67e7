package kubee2e

import (
	"bytes"
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"

	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// eventBound is how soon after a move its Event must be listed.
const eventBound = 2 * time.Second

// TestFailoverEvents: what an operator reads in `kubectl get events`.
// A holder pod deleted, then a holder node's link cut: for each VIP that
// moved, the pod on the node that took it has a VIPTaken Event naming the
// VIP, the node it came from and why, listed within eventBound of the
// move. With the API server stopped, a link cut moves the VIPs as fast
// (both times are logged), and the pod that took them logs that its
// Events were dropped.
func TestFailoverEvents(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 15*time.Minute)
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

	t.Run("a holder pod deleted", func(t *testing.T) {
		h := settled(ctx, t, c, vips)
		victim := c.Machine(h[vips[0]])
		moved := heldBy(h, victim.Lab(), vips)
		pod := podOn(t, podsReady(ctx, t, c), victim.Name)
		began := time.Now()
		if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "delete", "pod", pod.Name, "--wait=false"); err != nil {
			t.Fatal(err)
		}
		after, took := movedOff(ctx, t, c, victim, moved, vips, began)
		t.Logf("%s deleted: %v moved in %s; holders %s", pod.Name, moved, took.Round(time.Millisecond), after)
		takenEvents(ctx, t, c, moved, after, victim, began, "it gave the VIPs up")
		podsReady(ctx, t, c)
	})

	var cutTook, cutMaster time.Duration
	t.Run("a holder node's link cut", func(t *testing.T) {
		cut := cutHolder(ctx, t, c)
		cutTook, cutMaster = cut.took, cut.master
		takenEvents(ctx, t, c, cut.moved, cut.after, cut.victim, cut.began, "its adverts stopped")
		restoreLink(ctx, t, c, cut.victim)
	})

	t.Run("the API server stopped during a link cut", func(t *testing.T) {
		podsReady(ctx, t, c)
		settled(ctx, t, c, vips)
		pods := podsReady(ctx, t, c)
		t.Cleanup(func() {
			if _, ok := c.ControlPlane.Running(kube.APIServer); !ok {
				if err := c.ControlPlane.Start(context.Background(), kube.APIServer); err != nil {
					t.Error(err)
				}
			}
		})
		if err := c.ControlPlane.Stop(ctx, kube.APIServer); err != nil {
			t.Fatal(err)
		}
		cut := cutHolder(ctx, t, c)
		t.Logf("with the API server stopped: VIPs moved in %s as the client saw it, MASTER %s after the last advert as the taking node timed it; with it running: %s and %s",
			cut.took.Round(time.Millisecond), cut.master.Round(time.Millisecond), cutTook.Round(time.Millisecond), cutMaster.Round(time.Millisecond))
		if err := cut.victim.RestoreLink(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.ControlPlane.Start(ctx, kube.APIServer); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitAPI(ctx); err != nil {
			t.Fatal(err)
		}
		podsReady(ctx, t, c)
		// Every node that took one of the VIPs tried to write its Event
		// and says the API server did not answer.
		for _, n := range takers(cut.after, cut.moved) {
			log := logsOf(ctx, t, c, podOn(t, pods, n.Name).Name)
			if !bytes.Contains(log, []byte("events: the API server does not answer; events are dropped until it does")) {
				t.Errorf("%s took a VIP while the API server was stopped; its log does not say its events were dropped:\n%s", n.Name, tail(log, 30))
			}
		}
	})
}

// cutLink is a holder's link cut: its VIPs (moved) and their holders
// after; took is the time the client saw, master the mean of the taking
// nodes' own times from the last advert to MASTER
// (ipfailover_takeover_seconds, stage master).
type cutLink struct {
	victim       *kube.Machine
	moved        []netip.Addr
	after        lab.HolderMap
	began        time.Time
	took, master time.Duration
}

// cutHolder cuts the link of the holder of vips[0] and waits until its
// VIPs moved.
func cutHolder(ctx context.Context, t *testing.T, c *kube.Cluster) cutLink {
	t.Helper()
	var (
		victim       *kube.Machine
		moved        []netip.Addr
		after        lab.HolderMap
		began        time.Time
		took, master time.Duration
	)
	h := settled(ctx, t, c, vips)
	victim = c.Machine(h[vips[0]])
	moved = heldBy(h, victim.Lab(), vips)
	silent := map[string]string{"cause": "silent", "stage": "master"}
	counts, sums := map[string]uint64{}, map[string]float64{}
	for _, n := range c.Nodes {
		if n == victim {
			continue
		}
		m, err := c.Metrics(ctx, n.Lab())
		if err != nil {
			t.Fatal(err)
		}
		counts[n.Name], sums[n.Name], _ = m.Histogram("ipfailover_takeover_seconds", silent)
	}
	began = time.Now()
	if err := victim.CutLink(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if up, err := victim.Lab().Up(); err == nil && !up {
			if err := victim.RestoreLink(context.Background()); err != nil {
				t.Errorf("restoring %s's link: %v", victim.Name, err)
			}
		}
	})
	after, took = movedOff(ctx, t, c, victim, moved, vips, began)
	t.Logf("%s cut off: %v moved in %s; holders %s", victim.Name, moved, took.Round(time.Millisecond), after)
	// A takeover is counted once its announcement was seen, 100 ms after
	// keepalived's MASTER line at the soonest, or 2 s after it without
	// one: the client may see the VIP move first.
	var n uint64
	var sum float64
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, sum = 0, 0
		for _, taker := range takers(after, moved) {
			m, err := c.Metrics(ctx, taker)
			if err != nil {
				t.Fatal(err)
			}
			count, s, _ := m.Histogram("ipfailover_takeover_seconds", silent)
			n, sum = n+count-counts[taker.Name], sum+s-sums[taker.Name]
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node that took %v counted a silent takeover within 3 s of the move", moved)
		}
	}
	master = time.Duration(sum / float64(n) * float64(time.Second))
	return cutLink{victim: victim, moved: moved, after: after, began: began, took: took, master: master}
}

// restoreLink puts victim back on the network and waits for every pod.
func restoreLink(ctx context.Context, t *testing.T, c *kube.Cluster, victim *kube.Machine) {
	t.Helper()
	if err := victim.RestoreLink(ctx); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
}

// takers are the nodes that hold one of moved in after.
func takers(after lab.HolderMap, moved []netip.Addr) []*lab.Node {
	var out []*lab.Node
	for _, v := range moved {
		if n := after[v]; n != nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// takenEvents waits, for each VIP of moved, for the VIPTaken Event of the
// pod on its new holder (after) since began: its note names the VIP, the
// victim's address and why (because); listed within eventBound of the
// Event's own time. It logs `kubectl get events` as a user reads it.
func takenEvents(ctx context.Context, t *testing.T, c *kube.Cluster, moved []netip.Addr, after lab.HolderMap, victim *kube.Machine, began time.Time, because string) {
	t.Helper()
	from := "from " + victim.Lab().Addr4.String()
	found := map[netip.Addr]bool{}
	deadline := time.Now().Add(eventBound + 10*time.Second)
	for len(found) < len(moved) {
		if time.Now().After(deadline) {
			break
		}
		var list eventsv1.EventList
		if err := c.KubectlJSON(ctx, &list, "-n", kube.Namespace, "get", "events.v1.events.k8s.io", "-o", "json"); err != nil {
			t.Fatal(err)
		}
		seen := time.Now()
		for _, e := range list.Items {
			if e.Reason != "VIPTaken" || e.EventTime.Time.Before(began) || e.Regarding.Kind != "Pod" {
				continue
			}
			for _, v := range moved {
				holder := after[v]
				if found[v] || holder == nil || e.ReportingInstance != holder.Name || !strings.Contains(e.Note, v.String()+",") && !strings.Contains(e.Note, v.String()+" ") {
					continue
				}
				found[v] = true
				late := seen.Sub(e.EventTime.Time)
				t.Logf("%s: %s %s (%s): %q, listed %s after it", v, e.Reason, e.Regarding.Name, e.ReportingInstance, e.Note, late.Round(time.Millisecond))
				if !strings.Contains(e.Note, from) || !strings.Contains(e.Note, because) || !strings.HasPrefix(e.Note, holder.Name+" took") {
					t.Errorf("%s's event %q does not say that %s took it %s: %s", v, e.Note, holder.Name, from, because)
				}
				if e.Regarding.UID == "" {
					t.Errorf("%s's event is on pod %s without its uid: kubectl describe pod does not show it", v, e.Regarding.Name)
				}
				if late > eventBound {
					t.Errorf("%s's event was listed %s after the move, want at most %s", v, late.Round(time.Millisecond), eventBound)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, v := range moved {
		if !found[v] {
			t.Errorf("no VIPTaken event for %s on its new holder %s", v, after[v].Name)
		}
	}
	out, err := c.Kubectl(ctx, "get", "events", "-n", kube.Namespace, "--field-selector", "reason=VIPTaken")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get events -n %s --field-selector reason=VIPTaken:\n%s", kube.Namespace, out)
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
