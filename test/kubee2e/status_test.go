package kubee2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/kube"
)

// statusOf runs `ipfailover status` in a pod of the workload, as a user
// does, and returns its output and whether it exited 0.
func statusOf(ctx context.Context, c *kube.Cluster) (string, bool, error) {
	out, err := c.Kubectl(ctx, "-n", kube.Namespace, "exec", deployment, "--", "ipfailover", "status")
	switch {
	case err == nil:
		return string(out), true, nil
	case strings.Contains(string(out), "VIP "):
		// It ran and found the fleet not whole (exit 1).
		return string(out), false, nil
	}
	return string(out), false, err
}

// TestStatusNamesASilentPeer: `ipfailover status` shows one holder per VIP
// and every peer heard; when a firewall drops IP protocol 112 between two
// nodes, each pod of the two stops hearing the other within seconds
// (ipfailover_peer_heard 0: the alert IPFailoverPeerSilent's expression),
// status names it and shows the VIP both now hold as held twice, and
// exits 1; once VRRP flows again, the fleet is whole again.
func TestStatusNamesASilentPeer(t *testing.T) {
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
	// Every pod has heard every other's heartbeat by now.
	whole := func(what string) string {
		t.Helper()
		var out string
		deadline := time.Now().Add(30 * time.Second)
		for {
			var ok bool
			var err error
			out, ok, err = statusOf(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the fleet is not whole:\n%s", what, out)
			}
			time.Sleep(time.Second)
		}
	}
	out := whole("at rest")
	t.Logf("ipfailover status at rest:\n%s", out)
	for _, p := range pods {
		if !strings.Contains(out, p.Name) {
			t.Errorf("status does not show %s", p.Name)
		}
	}

	n1, n2 := c.Nodes[0], c.Nodes[1]
	p1, p2 := podOn(t, pods, n1.Name), podOn(t, pods, n2.Name)
	began := time.Now()
	for _, d := range [][2]*kube.Machine{{n1, n2}, {n2, n1}} {
		if err := d[0].Lab().DropVRRPFrom(ctx, d[1].Lab()); err != nil {
			t.Fatal(err)
		}
	}
	allowed := false
	allow := func() {
		if allowed {
			return
		}
		allowed = true
		for _, d := range [][2]*kube.Machine{{n1, n2}, {n2, n1}} {
			if err := d[0].Lab().AllowVRRPFrom(context.WithoutCancel(ctx), d[1].Lab()); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(allow)
	// Each of the two stops hearing the other: the alert's expression.
	for _, s := range []struct {
		n    *kube.Machine
		peer string
	}{{n1, n2.Lab().Addr4.String()}, {n2, n1.Lab().Addr4.String()}} {
		for {
			m, err := c.Metrics(ctx, s.n.Lab())
			if err == nil && m.Count("ipfailover_peer_heard", map[string]string{"peer": s.peer}) == 1 &&
				m.Sum("ipfailover_peer_heard", map[string]string{"peer": s.peer}) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never stopped hearing %s", s.n.Name, s.peer)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	silentIn := time.Since(began)
	t.Logf("both pods named the other silent %s after VRRP was dropped between them", silentIn.Round(time.Millisecond))
	if silentIn > 10*time.Second {
		t.Errorf("the silent peer was named after %s, want within seconds", silentIn.Round(time.Millisecond))
	}
	// A VIP one of the two held is held by both now.
	var split string
	deadline := time.Now().Add(time.Minute)
	for {
		out, ok, err := statusOf(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if !ok && strings.Contains(out, "HELD TWICE") && strings.Contains(out, "NOT "+p2.Name) && strings.Contains(out, "NOT "+p1.Name) {
			split = out
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the split:\n%s", out)
		}
		time.Sleep(time.Second)
	}
	t.Logf("ipfailover status with VRRP dropped between %s and %s:\n%s", n1.Name, n2.Name, split)
	if !strings.Contains(split, fmt.Sprintf("! %s does not hear %s's VRRP", p1.Name, p2.Name)) {
		t.Errorf("status does not say that %s does not hear %s", p1.Name, p2.Name)
	}

	allow()
	out = whole("after VRRP flows again")
	t.Logf("ipfailover status once VRRP flows again:\n%s", out)
	checkEvents(ctx, t, c, since)
}
