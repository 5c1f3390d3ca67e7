package kubee2e

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// crashBound bounds how long a dead node's VIPs take to move: VRRP's
// master-down interval, 3 advert intervals plus the backup's skew (under
// a second), plus room for a machine several times slower than this one.
const crashBound = 3*fastAdvert + 2*time.Second

// nodeDeath kills victim (daemons, shims, containers; then its link) and
// checks what a user sees: its VIPs move within crashBound; its pod's
// replacement waits Pending once the node is marked unreachable, and the
// VIPs stay served meanwhile; the node reboots, its pod is replaced there,
// and every VIP ends with one holder, none away longer than a handover.
func nodeDeath(ctx context.Context, t *testing.T, c *kube.Cluster, victim *kube.Machine, vs []netip.Addr) {
	t.Helper()
	h := settled(ctx, t, c, vs)
	moved := heldBy(h, victim.Lab(), vs)
	if len(moved) == 0 {
		t.Fatalf("%s holds none of %v", victim.Name, vs)
	}
	began := time.Now()
	kill(ctx, t, victim)
	after, took := movedOff(ctx, t, c, victim, moved, vs, began)
	t.Logf("%s died: %v moved in %s; holders %s", victim.Name, moved, took.Round(time.Millisecond), after)

	gaps, err := c.ProbeDuring(ctx, targets(vs), probeEvery, func() error {
		p := pending(ctx, t, c, podLabel)
		t.Logf("%s is unreachable; the replacement %s waits Pending (%s after the death)", victim.Name, p.Name, time.Since(began).Round(time.Second))
		_, err := c.Holders(ctx, vs, quiet)
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gaps {
		if g.Longest > handoverBound {
			t.Errorf("while %s was dead and its pod's replacement Pending, %s was unanswered for %s", victim.Name, vs[i], g)
		}
	}

	gaps, err = c.ProbeDuring(ctx, targets(vs), probeEvery, func() error {
		if err := victim.Boot(ctx); err != nil {
			return err
		}
		if err := c.WaitNodesReady(ctx); err != nil {
			return err
		}
		podsReady(ctx, t, c)
		return nil
	}, func() error {
		_, err := c.Holders(ctx, vs, quiet)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gaps {
		t.Logf("%s back: %s longest gap %s", victim.Name, vs[i], g)
		if g.Longest > handoverBound {
			t.Errorf("as %s came back, %s was unanswered for %s, want at most %s", victim.Name, vs[i], g, handoverBound)
		}
	}
	t.Logf("%s back: holders %s", victim.Name, settled(ctx, t, c, vs))
}

// kill kills victim (Machine.Die) and boots it again when the test ends,
// if the test did not.
func kill(ctx context.Context, t *testing.T, victim *kube.Machine) {
	t.Helper()
	if err := victim.Die(ctx); err != nil {
		t.Fatal(err)
	}
	// A test that fails half way leaves the node booted for the next.
	t.Cleanup(func() {
		if _, ok := victim.Running(kube.Kubelet); !ok {
			if err := victim.Boot(context.Background()); err != nil {
				t.Errorf("booting %s again: %v", victim.Name, err)
			}
		}
	})
}

// movedOff waits until none of moved is on victim and every VIP of vs has
// one holder, and returns the holders and the time since began; longer
// than crashBound is an error.
func movedOff(ctx context.Context, t *testing.T, c *kube.Cluster, victim *kube.Machine, moved, vs []netip.Addr, began time.Time) (lab.HolderMap, time.Duration) {
	t.Helper()
	after, err := c.Lab().WaitOneHolder(ctx, vs, func(m lab.HolderMap) bool {
		return !slices.ContainsFunc(moved, func(v netip.Addr) bool { return m[v] == victim.Lab() })
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if took > crashBound {
		t.Errorf("%s's VIPs %v took %s to move, want at most %s (3 advert intervals and the skew, with room)", victim.Name, moved, took.Round(time.Millisecond), crashBound)
	}
	return after, took
}

// heldBy lists the VIPs n holds.
func heldBy(h lab.HolderMap, n *lab.Node, vs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, v := range vs {
		if h[v] == n {
			out = append(out, v)
		}
	}
	return out
}

// linkCut cuts a holder's link, its processes running on: the rest of the
// cluster takes its VIPs within crashBound and replaces its pod once it is
// unreachable; when the link is back, the node's own keepalived, which
// held every VIP alone, meets the others, the kubelet ends the pod the API
// server replaced, and every VIP ends with one holder.
func linkCut(ctx context.Context, t *testing.T, c *kube.Cluster, victim *kube.Machine, vs []netip.Addr) {
	t.Helper()
	h := settled(ctx, t, c, vs)
	moved := heldBy(h, victim.Lab(), vs)
	began := time.Now()
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
	after, took := movedOff(ctx, t, c, victim, moved, vs, began)
	t.Logf("%s cut off: %v moved in %s; holders %s", victim.Name, moved, took.Round(time.Millisecond), after)
	p := pending(ctx, t, c, podLabel)
	t.Logf("%s is unreachable; the replacement %s waits Pending", victim.Name, p.Name)
	if err := victim.RestoreLink(ctx); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
	t.Logf("%s back on the network: holders %s (%s after the cut)", victim.Name, settled(ctx, t, c, vs), time.Since(began).Round(time.Second))
}

// deathAfterDrain replays chaos seed 3's fault 12 on the cluster: a
// holder's node is drained and, the moment its pod is gone, the node that
// took its first VIP dies. The others must not reload keepalived for the
// drained pod (its address is held, membership.PeerHold): a reload restarts
// every backup's master-down timer, and one just after the death kept the
// dead node's VIPs out 3.53 s where the timers allow 3.11 s. So the
// survivor's log has no reload without the drained pod's address, and the
// VIPs move within crashBound (the figure is logged).
func deathAfterDrain(ctx context.Context, t *testing.T, c *kube.Cluster, vs []netip.Addr) {
	t.Helper()
	h := settled(ctx, t, c, vs)
	drained := c.Machine(h[vs[0]])
	pods := podsReady(ctx, t, c)
	began := time.Now()
	t.Cleanup(func() {
		if err := c.Uncordon(context.Background(), drained.Name); err != nil {
			t.Error(err)
		}
	})
	if err := c.Drain(ctx, drained.Name); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	// The drained pod said goodbye as it went: its VIPs are elsewhere.
	h, err := c.Lab().WaitOneHolder(ctx, vs, func(m lab.HolderMap) bool {
		return !slices.ContainsFunc(vs, func(v netip.Addr) bool { return m[v] == drained.Lab() })
	})
	if err != nil {
		t.Fatal(err)
	}
	victim := c.Machine(h[vs[0]])
	moved := heldBy(h, victim.Lab(), vs)
	died := time.Now()
	kill(ctx, t, victim)
	after, took := movedOff(ctx, t, c, victim, moved, vs, died)
	t.Logf("%s drained (its pod gone %s after the drain began); %s died %s later: %v moved in %s (the timers: %s and the skew); holders %s",
		drained.Name, gone.Sub(began).Round(time.Millisecond), victim.Name, died.Sub(gone).Round(time.Millisecond), moved, took.Round(time.Millisecond), masterDown, after)
	// The survivor kept the drained pod's address: no reload for it.
	var survivors []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != drained.Name && p.Spec.NodeName != victim.Name {
			survivors = append(survivors, p)
		}
	}
	if len(survivors) != 1 {
		t.Fatalf("pods %d on nodes other than %s and %s, want one", len(survivors), drained.Name, victim.Name)
	}
	reloads, err := c.Reloads(ctx, kube.Namespace, survivors, drained.Lab().Addr4, "removed", began)
	if err != nil {
		t.Fatal(err)
	}
	if r := reloads[survivors[0].Name]; len(r) > 0 {
		t.Errorf("%s reloaded keepalived without the drained %s's address %s after the drain, want it held: %v", survivors[0].Name, drained.Name, drained.Lab().Addr4, r)
	}

	if err := victim.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNodesReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Uncordon(ctx, drained.Name); err != nil {
		t.Fatal(err)
	}
	podsReady(ctx, t, c)
	t.Logf("%s back, %s uncordoned: holders %s (%s after the drain began)", victim.Name, drained.Name, settled(ctx, t, c, vs), time.Since(began).Round(time.Second))
}
