package kubee2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/kube"
)

const jobLabel = "app=remove-ipfailover"

// runCleanup runs the cleanup Job of deploy/<base> (its workload's pods
// gone, their ConfigMap still there) as deploy/README.md tells: one pod per
// node, each leaving no VIP, VRRP rule, nftables table or keepalived. A
// pod killed without its goodbye leaves its VIPs: two are put back on
// nodes first, as such a pod leaves them. Run twice: it is idempotent.
func runCleanup(ctx context.Context, t *testing.T, c *kube.Cluster, base string, vs []netip.Addr) {
	t.Helper()
	for i, v := range vs[:2] {
		if _, err := c.Nodes[i+1].Lab().Exec(ctx, "ip", "addr", "add", v.String()+"/32", "dev", "eth0"); err != nil {
			t.Fatal(err)
		}
	}
	before := leftovers(ctx, t, c, vs)
	t.Logf("before the cleanup: %v", before)
	if len(before) < len(c.Nodes)+2 {
		t.Fatalf("before the cleanup: want every node's VRRP rule and two VIPs, found %v", before)
	}
	o := kube.Overlay{Base: base, Image: image, Replicas: len(c.Nodes)}
	for round := 1; round <= 2; round++ {
		if err := c.Apply(ctx, o); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kubectl(ctx, "-n", kube.Namespace, "wait", "--for=condition=complete", "job/remove-ipfailover", "--timeout=5m"); err != nil {
			t.Fatal(err)
		}
		pods, err := c.Pods(ctx, jobLabel)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			nodes[p.Spec.NodeName] = true
			if p.Status.Phase != "Succeeded" {
				t.Errorf("round %d: %s on %s: %s", round, p.Name, p.Spec.NodeName, p.Status.Phase)
			}
		}
		if len(pods) != len(c.Nodes) || len(nodes) != len(c.Nodes) {
			t.Errorf("round %d: %d cleanup pods on nodes %v, want one on each of %d", round, len(pods), nodes, len(c.Nodes))
		}
		if round == 1 {
			out, err := c.Kubectl(ctx, "-n", kube.Namespace, "logs", "-l", jobLabel, "--prefix", "--tail=-1")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the cleanup pods' logs:\n%s", out)
		}
		if left := leftovers(ctx, t, c, vs); len(left) > 0 {
			t.Errorf("round %d: after the cleanup Job: %v", round, left)
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = c.Delete(dctx, o)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		waitNoPods(ctx, t, c, jobLabel)
	}
}
