package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	dashboardComponent = "components/dashboard"
	dashboardConfigMap = "ipfailover-dashboard"
	dashboardKey       = "ipfailover.json"
	// sidecarLabel is the label Grafana's dashboard sidecar loads
	// ConfigMaps by.
	sidecarLabel = "grafana_dashboard"
)

// grafanaDashboard is the part of the Grafana operator's GrafanaDashboard
// that docs/monitoring.md shows; strict decoding rejects any other field.
type grafanaDashboard struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		AllowCrossNamespaceImport bool                 `json:"allowCrossNamespaceImport"`
		InstanceSelector          metav1.LabelSelector `json:"instanceSelector"`
		ConfigMapRef              struct {
			Name string `json:"name"`
			Key  string `json:"key"`
		} `json:"configMapRef"`
	} `json:"spec"`
}

// TestDashboardComponent: components/dashboard adds to an overlay the
// ConfigMap of the generated dashboard, in the workload's namespace
// (deploy/'s, or the one the overlay sets), with the label Grafana's
// sidecar loads it by; and the GrafanaDashboard that docs/monitoring.md
// shows for the Grafana operator names that ConfigMap and key, in that
// namespace.
func TestDashboardComponent(t *testing.T) {
	b := build(t, overlay(t, "", []string{"overlays/kubernetes"}, []string{dashboardComponent}))
	cm, ok := b.configMaps[dashboardConfigMap]
	if !ok {
		t.Fatalf("no ConfigMap %s in the build", dashboardConfigMap)
	}
	if ns := b.namespaced["ConfigMap/"+dashboardConfigMap]; ns != namespace {
		t.Errorf("ConfigMap %s in namespace %q, want %q", dashboardConfigMap, ns, namespace)
	}
	if got := cm.Labels[sidecarLabel]; got != "1" {
		t.Errorf("ConfigMap %s: label %s=%q, want \"1\"", dashboardConfigMap, sidecarLabel, got)
	}
	want, err := os.ReadFile(dashboardComponent + "/" + dashboardKey)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[dashboardKey] != string(want) {
		t.Errorf("ConfigMap %s: key %s is not %s/%s", dashboardConfigMap, dashboardKey, dashboardComponent, dashboardKey)
	}
	moved := build(t, overlay(t, "namespace: failover-b\n", []string{"overlays/kubernetes"}, []string{dashboardComponent}))
	if ns := moved.namespaced["ConfigMap/"+dashboardConfigMap]; ns != "failover-b" {
		t.Errorf("an overlay's namespace failover-b leaves ConfigMap %s in %q", dashboardConfigMap, ns)
	}
	var d struct {
		UID   string `json:"uid"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal(want, &d); err != nil || d.UID == "" || d.Title == "" {
		t.Errorf("%s: not a dashboard with a uid and a title (%+v, %v)", dashboardKey, d, err)
	}

	page, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n( *apiVersion: grafana\\.integreatly\\.org/[^\n]*\n *kind: GrafanaDashboard\n.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatalf("%s shows no GrafanaDashboard", runbooks)
	}
	var gd grafanaDashboard
	if err := yaml.UnmarshalStrict([]byte(dedent(string(m[1]))), &gd); err != nil {
		t.Fatalf("%s: the GrafanaDashboard: %v", runbooks, err)
	}
	if gd.Namespace != namespace || gd.Spec.ConfigMapRef.Name != dashboardConfigMap || gd.Spec.ConfigMapRef.Key != dashboardKey {
		t.Errorf("%s: the GrafanaDashboard in namespace %q names ConfigMap %q key %q, want %q, %q, %q", runbooks,
			gd.Namespace, gd.Spec.ConfigMapRef.Name, gd.Spec.ConfigMapRef.Key, namespace, dashboardConfigMap, dashboardKey)
	}
	if len(gd.Spec.InstanceSelector.MatchLabels) == 0 {
		t.Errorf("%s: the GrafanaDashboard selects no Grafana (instanceSelector)", runbooks)
	}
}
