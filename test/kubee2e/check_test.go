package kubee2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// podsReady waits until every node has one ipfailover pod, Ready, and no
// other is left, and returns them.
func podsReady(ctx context.Context, t *testing.T, c *kube.Cluster) []corev1.Pod {
	t.Helper()
	n := len(c.Nodes)
	var pods []corev1.Pod
	var last string
	for {
		var err error
		pods, err = c.Pods(ctx, podLabel)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		ready := 0
		var desc []string
		for _, p := range pods {
			if p.DeletionTimestamp == nil && kube.Ready(p) && !nodes[p.Spec.NodeName] {
				ready++
				nodes[p.Spec.NodeName] = true
			}
			desc = append(desc, fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, kube.Ready(p)))
		}
		last = strings.Join(desc, "; ")
		if ready == n && len(pods) == n {
			return pods
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d Ready pods %s, one per node: %v; last seen: %s", n, podLabel, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podOn returns the pod of the list on node, or fails.
func podOn(t *testing.T, pods []corev1.Pod, node string) corev1.Pod {
	t.Helper()
	for _, p := range pods {
		if p.Spec.NodeName == node {
			return p
		}
	}
	t.Fatalf("no pod on %s", node)
	return corev1.Pod{}
}

// settled waits for one holder per VIP, unchanged for quiet.
func settled(ctx context.Context, t *testing.T, c *kube.Cluster, vs []netip.Addr) lab.HolderMap {
	t.Helper()
	m, err := c.Holders(ctx, vs, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// permissionErrors are what a missing capability or a read-only path
// makes keepalived and the entrypoint log (docs/installation.md, Privileges).
var permissionErrors = []string{"Operation not permitted", "Permission denied", "Read-only file system", "cant open raw socket", "Couldn't setgroups"}

// checkLogs fails on a permission error in any pod's log.
func checkLogs(ctx context.Context, t *testing.T, c *kube.Cluster, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		out, err := c.Kubectl(ctx, "-n", kube.Namespace, "logs", p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range permissionErrors {
			if bytes.Contains(out, []byte(bad)) {
				t.Errorf("%s on %s logs %q:\n%s", p.Name, p.Spec.NodeName, bad, out)
			}
		}
	}
}

// capability numbers of linux/capability.h, for /proc/PID/status.
var capBits = map[corev1.Capability]uint{
	"SETGID": 6, "SETUID": 7, "NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_MODULE": 16,
}

// checkSecurity: each pod's container runs with the manifest's security
// context as the kernel applies it: exactly the added capabilities
// (effective, permitted, bounding), no_new_privs, a seccomp filter
// (RuntimeDefault), a read-only root filesystem.
func checkSecurity(ctx context.Context, t *testing.T, c *kube.Cluster, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		sc := p.Spec.Containers[0].SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Fatalf("%s has no security context", p.Name)
		}
		var want uint64
		for _, cp := range sc.Capabilities.Add {
			bit, ok := capBits[cp]
			if !ok {
				t.Fatalf("capability %s: add its number to capBits", cp)
			}
			want |= 1 << bit
		}
		pid := containerPID(ctx, t, c, p)
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatal(err)
		}
		field := func(name string) string {
			for _, line := range strings.Split(string(status), "\n") {
				if v, ok := strings.CutPrefix(line, name+":"); ok {
					return strings.TrimSpace(v)
				}
			}
			return ""
		}
		for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
			if got, err := strconv.ParseUint(field(f), 16, 64); err != nil || got != want {
				t.Errorf("%s: %s = %s, want %x (%v)", p.Name, f, field(f), want, sc.Capabilities.Add)
			}
		}
		if got := field("NoNewPrivs"); got != "1" {
			t.Errorf("%s: NoNewPrivs = %s, want 1 (allowPrivilegeEscalation: false)", p.Name, got)
		}
		if got := field("Seccomp"); got != "2" {
			t.Errorf("%s: Seccomp = %s, want 2: a filter (RuntimeDefault)", p.Name, got)
		}
		mounts, err := os.ReadFile("/proc/" + pid + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		root := false
		for _, line := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(line)
			if len(f) > 5 && f[4] == "/" {
				root = strings.HasPrefix(f[5], "ro")
			}
		}
		if !root {
			t.Errorf("%s: the root filesystem is not read-only", p.Name)
		}
	}
}

// containerPID returns the host PID of a pod's first container, as its
// node's containerd lists it.
func containerPID(ctx context.Context, t *testing.T, c *kube.Cluster, p corev1.Pod) string {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("%s has no container status", p.Name)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	n := c.Node(p.Spec.NodeName)
	out, err := n.Exec(ctx, "ctr", "--address", "/run/containerd/containerd.sock", "--namespace", "k8s.io", "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			return f[1]
		}
	}
	t.Fatalf("%s: container %s not among %s's tasks:\n%s", p.Name, id, n.Name, out)
	return ""
}

// leftovers lists what the pods add to a node that is still there: VIPs,
// the VRRP rule in INPUT, the nftables table, a keepalived process.
func leftovers(ctx context.Context, t *testing.T, c *kube.Cluster, vs []netip.Addr) []string {
	t.Helper()
	var found []string
	for _, n := range c.Nodes {
		for _, v := range vs {
			if has, err := n.Lab().Has(v); err != nil {
				t.Fatal(err)
			} else if has {
				found = append(found, n.Name+": VIP "+v.String())
			}
		}
		if out, err := n.Lab().Exec(ctx, "iptables", "-w", "-S", "INPUT"); err != nil {
			t.Fatal(err)
		} else if bytes.Contains(out, []byte("224.0.0.18")) {
			found = append(found, n.Name+": VRRP rule in INPUT")
		}
		if out, err := n.Lab().Exec(ctx, "nft", "list", "tables"); err != nil {
			t.Fatal(err)
		} else if bytes.Contains(out, []byte("keepalived")) {
			found = append(found, n.Name+": nftables table keepalived")
		}
		procs, err := n.Lab().Procs()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(procs, func(p lab.Proc) bool { return p.Comm == "keepalived" && p.State != "Z" }) {
			found = append(found, n.Name+": keepalived running")
		}
	}
	return found
}
