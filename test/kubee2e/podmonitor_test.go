package kubee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipfailover/ipfailover/test/kube"
)

// promOperator is the prometheus-operator release whose published CRDs
// (its module's example/prometheus-operator-crd) the test installs: the
// PodMonitor and PrometheusRule of overlays/kubernetes-podmonitor must be
// valid under them, as they must on a user's cluster.
const promOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// TestPodMonitor applies overlays/kubernetes-podmonitor on a cluster with
// prometheus-operator's CRDs: the API server accepts the PodMonitor and the
// PrometheusRule (validated against the CRDs' schemas), the PodMonitor
// selects the three pods by a port they have, and the headless metrics
// Service lists every pod, each serving its metrics there.
func TestPodMonitor(t *testing.T) {
	c := need(t)
	ctx := testContext(t, 10*time.Minute)
	since := time.Now()
	services(t, c)
	crds := crdFiles(ctx, t, "podmonitors", "prometheusrules")
	for _, f := range crds {
		if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", f); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, f := range crds {
			if _, err := c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", f); err != nil {
				t.Error(err)
			}
		}
	})
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}
	o := overlay("overlays/kubernetes-podmonitor", nil)
	if err := c.Apply(ctx, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteOverlay(t, c, o) })
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	pods := podsReady(ctx, t, c)

	var pm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	if err := c.KubectlJSON(ctx, &pm, "-n", kube.Namespace, "get", "podmonitor", "ipfailover"); err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Spec struct {
			Groups []struct {
				Rules []json.RawMessage `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := c.KubectlJSON(ctx, &rules, "-n", kube.Namespace, "get", "prometheusrule", "ipfailover"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Spec.Groups {
		n += len(g.Rules)
	}
	t.Logf("the API server holds the PodMonitor (endpoints %+v) and the PrometheusRule (%d rules)", pm.Spec.Endpoints, n)
	if n == 0 {
		t.Error("the PrometheusRule has no rules")
	}
	var sel []string
	for k, v := range pm.Spec.Selector.MatchLabels {
		sel = append(sel, k+"="+v)
	}
	selected, err := c.Pods(ctx, strings.Join(sel, ","))
	if err != nil {
		t.Fatal(err)
	}
	if len(selected) != len(pods) {
		t.Errorf("the PodMonitor selects %d pods, want the %d pods", len(selected), len(pods))
	}
	for _, p := range selected {
		for _, ep := range pm.Spec.Endpoints {
			found := false
			for _, port := range p.Spec.Containers[0].Ports {
				found = found || port.Name == ep.Port
			}
			if !found {
				t.Errorf("%s has no port %q for the PodMonitor", p.Name, ep.Port)
			}
		}
	}

	var slices discoveryv1.EndpointSliceList
	if err := c.KubectlJSON(ctx, &slices, "-n", kube.Namespace, "get", "endpointslices", "-l", "kubernetes.io/service-name=ipfailover-metrics"); err != nil {
		t.Fatal(err)
	}
	var addrs []netip.AddrPort
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				for _, p := range s.Ports {
					if p.Port != nil {
						addrs = append(addrs, netip.AddrPortFrom(netip.MustParseAddr(a), uint16(*p.Port)))
					}
				}
			}
		}
	}
	if len(addrs) != len(pods) {
		t.Errorf("the metrics Service lists %v, want one address per pod (%d)", addrs, len(pods))
	}
	for _, a := range addrs {
		body, err := c.Lab().Get(ctx, fmt.Sprintf("http://%s/metrics", a))
		if err != nil || !strings.Contains(body, "\nkeepalived_up 1\n") {
			t.Errorf("scraping %s from the client: %v; keepalived_up 1 in %d bytes: %v", a, err, len(body), strings.Contains(body, "\nkeepalived_up 1\n"))
		}
	}
	checkEvents(ctx, t, c, since)
}

// crdFiles returns the paths of prometheus-operator's published CRDs of
// the given plurals, from its Go module (downloaded once into the module
// cache).
func crdFiles(ctx context.Context, t *testing.T, plurals ...string) []string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", promOperator)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cmd.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", promOperator, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", promOperator, err, mod.Error)
	}
	var files []string
	for _, p := range plurals {
		files = append(files, filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+p+".yaml"))
	}
	return files
}
