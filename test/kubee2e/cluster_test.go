package kubee2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/kube"
)

// TestCluster: the cluster is one a user's manifests can rely on: every
// node Ready under its own name, and a pod on any node, on the pod network
// or the host's, reaches the API server through the kubernetes Service
// (kube-proxy's rules in the node), as in a user's cluster.
func TestCluster(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 5*time.Minute)
	ready, err := c.NodeStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if !ready[n.Name] {
			t.Errorf("%s is not Ready (%v)", n.Name, ready)
		}
		out, err := n.Exec(ctx, "hostname")
		if err != nil || strings.TrimSpace(string(out)) != n.Name {
			t.Errorf("%s's hostname is %q (%v)", n.Name, out, err)
		}
	}
	var names []string
	for _, n := range c.Nodes {
		for _, host := range []bool{false, true} {
			name := fmt.Sprintf("api-from-%s-host-%v", n.Name, host)
			names = append(names, name)
			overrides := fmt.Sprintf(`{"spec":{"nodeName":%q,"hostNetwork":%v}}`, n.Name, host)
			if _, err := c.Kubectl(ctx, "-n", "default", "run", name, "--image="+image, "--image-pull-policy=Never",
				"--restart=Never", "--overrides="+overrides, "--command", "--",
				"sh", "-c", `curl -sSk -m 10 "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version"`); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		args := append([]string{"-n", "default", "delete", "pod", "--wait=false"}, names...)
		if _, err := c.Kubectl(context.Background(), args...); err != nil {
			t.Error(err)
		}
	})
	for _, name := range names {
		if _, err := c.Kubectl(ctx, "-n", "default", "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/"+name, "--timeout=2m"); err != nil {
			var p corev1.Pod
			_ = c.KubectlJSON(ctx, &p, "-n", "default", "get", "pod", name)
			logs, _ := c.Kubectl(ctx, "-n", "default", "logs", name)
			t.Errorf("%s: %v; phase %s; log %s", name, err, p.Status.Phase, logs)
			continue
		}
		logs, err := c.Kubectl(ctx, "-n", "default", "logs", name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(logs), `"gitVersion": "`+kube.Version+`"`) {
			t.Errorf("%s: the API server's /version through the kubernetes Service: %s", name, logs)
		}
	}
}
