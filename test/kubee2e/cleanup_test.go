package kubee2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/kube"
)

const cleanupLabel = "app=remove-ipfailover"

// runCleanup runs the cleanup of deploy/<base> (its workload's pods gone,
// their ConfigMap still there) as docs/installation.md tells: a DaemonSet
// whose pod on every node, whatever ran there, leaves no VIP, VRRP rule,
// nftables table or keepalived. A pod killed without its goodbye leaves
// its VIPs: two are put back on nodes first, as such a pod leaves them.
// Run twice: it is idempotent.
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
	o := kube.Overlay{Base: base, Image: image}
	for round := 1; round <= 2; round++ {
		if err := c.Apply(ctx, o); err != nil {
			t.Fatal(err)
		}
		if err := c.RolloutStatus(ctx, "ds/remove-ipfailover"); err != nil {
			t.Fatal(err)
		}
		pods, err := c.Pods(ctx, cleanupLabel)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, p := range pods {
			nodes[p.Spec.NodeName] = true
			if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil ||
				p.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
				t.Errorf("round %d: %s on %s: the cleanup did not end well: %+v", round, p.Name, p.Spec.NodeName, p.Status.InitContainerStatuses)
			}
		}
		if len(pods) != len(c.Nodes) || len(nodes) != len(c.Nodes) {
			t.Errorf("round %d: %d cleanup pods on nodes %v, want one on each of %d", round, len(pods), nodes, len(c.Nodes))
		}
		for _, p := range pods {
			checkExitedSpec(ctx, t, c, p)
		}
		if round == 1 {
			out, err := c.Kubectl(ctx, "-n", kube.Namespace, "logs", "-l", cleanupLabel, "-c", "remove-failover", "--prefix", "--tail=-1")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the cleanup pods' logs:\n%s", out)
		}
		if left := leftovers(ctx, t, c, vs); len(left) > 0 {
			t.Errorf("round %d: after the cleanup: %v", round, left)
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = c.Delete(dctx, o)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		waitNoPods(ctx, t, c, cleanupLabel)
	}
}

// checkExitedSpec checks the security context of a cleanup pod's init
// container, which has exited, as containerd handed it to runc: exactly
// the added capabilities, no_new_privs, a read-only root, a seccomp filter.
func checkExitedSpec(ctx context.Context, t *testing.T, c *kube.Cluster, p corev1.Pod) {
	t.Helper()
	if len(p.Status.InitContainerStatuses) == 0 {
		t.Errorf("%s has no init container status", p.Name)
		return
	}
	_, id, _ := strings.Cut(p.Status.InitContainerStatuses[0].ContainerID, "://")
	out, err := c.Node(p.Spec.NodeName).Exec(ctx, "ctr", "--address", "/run/containerd/containerd.sock", "--namespace", "k8s.io", "containers", "info", id)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Spec struct {
			Process struct {
				NoNewPrivileges bool `json:"noNewPrivileges"`
				Capabilities    struct {
					Effective, Permitted, Bounding []string
				} `json:"capabilities"`
			} `json:"process"`
			Root struct {
				Readonly bool `json:"readonly"`
			} `json:"root"`
			Linux struct {
				Seccomp *json.RawMessage `json:"seccomp"`
			} `json:"linux"`
		} `json:"Spec"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("%s: containers info: %v", p.Name, err)
	}
	var want []string
	for _, cp := range p.Spec.InitContainers[0].SecurityContext.Capabilities.Add {
		want = append(want, "CAP_"+string(cp))
	}
	caps := info.Spec.Process.Capabilities
	for name, got := range map[string][]string{"effective": caps.Effective, "permitted": caps.Permitted, "bounding": caps.Bounding} {
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("%s: %s capabilities %v, want %v", p.Name, name, got, want)
		}
	}
	if !info.Spec.Process.NoNewPrivileges || !info.Spec.Root.Readonly || info.Spec.Linux.Seccomp == nil {
		t.Errorf("%s: no_new_privs %v, read-only root %v, seccomp %v; want all", p.Name, info.Spec.Process.NoNewPrivileges, info.Spec.Root.Readonly, info.Spec.Linux.Seccomp != nil)
	}
}
