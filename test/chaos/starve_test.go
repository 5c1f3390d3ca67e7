package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipfailover/ipfailover/test/lab"
)

// TestIPFailoverCPURequest: the lab gives ipfailover's cgroup the share of
// the manifests' CPU request, and the burner the rest of the node.
func TestIPFailoverCPURequest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("deploy/base's pod has %d containers, want ipfailover's alone", len(cs))
	}
	got := cs[0].Resources.Requests.Cpu().MilliValue()
	if got != ipfailoverCPURequest {
		t.Errorf("deploy/base's ipfailover requests %dm of CPU, the chaos lab's cgroup %dm", got, ipfailoverCPURequest)
	}
	if starveCPURequest() <= 5*ipfailoverCPURequest {
		t.Errorf("the burner requests %dm, not much more than ipfailover's %dm", starveCPURequest(), ipfailoverCPURequest)
	}
}

func TestBurnerPod(t *testing.T) {
	b, err := burnerPod("node2", "localhost/ipfailover:dev", 2, 1900)
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Kind != "Pod" || p.Name != "cpu-starve-node2" || p.Namespace != burnerNamespace || p.Spec.NodeName != "node2" || p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod %s/%s %s on %q, restart %s", p.Namespace, p.Name, p.Kind, p.Spec.NodeName, p.Spec.RestartPolicy)
	}
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	if c.Image != "localhost/ipfailover:dev" || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %s, pull %s", c.Image, c.ImagePullPolicy)
	}
	if !slices.Equal(c.Command, []string{"sh", "-c", lab.BurnScript, "sh", "2"}) {
		t.Errorf("command %q", c.Command)
	}
	if got := c.Resources.Requests.Cpu().MilliValue(); got != 1900 {
		t.Errorf("requests %dm of CPU, want 1900m", got)
	}
	if !c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("a CPU limit %s: the burner must be free to take every core", c.Resources.Limits.Cpu())
	}
	if !strings.Contains(string(b), `"cpu":"1900m"`) {
		t.Errorf("manifest %s", b)
	}
}
