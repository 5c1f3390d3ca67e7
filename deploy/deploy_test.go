// Package deploy_test checks the manifests under deploy/: every YAML file
// decodes strictly into its Kubernetes (or kustomize) type, every
// kustomization builds with krusty, the built workloads have what an
// ipfailover pod needs, and every variable name a manifest or the
// documentation mentions is one the program reads.
package deploy_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ipfailover/ipfailover/config"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	namespace   = "ipfailover"
	configMap   = "ipfailover-config"
	metricsPort = 9650
	image       = "ipfailover:latest"
	cleanupPath = "/var/lib/ipfailover/keepalived/remove-failover.sh"
	// promtoolTests is promtool's unit test file, not a manifest.
	promtoolTests = "components/alerts/rules_test.yaml"
)

// Least privilege: the capabilities each container adds, everything else
// dropped (docs/installation.md, "Privileges", says why each is there).
var (
	podCapabilities = []corev1.Capability{"NET_ADMIN", "NET_RAW", "SETGID"}
	jobCapabilities = []corev1.Capability{"NET_ADMIN"}
)

// What a node agent needs on a busy node (base/deployment.yaml says why):
// the highest priority class, requests for the entrypoint and keepalived
// together, a memory limit well above them and no CPU limit.
const priorityClass = "system-node-critical"

var (
	podRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	podLimits   = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
)

// podMonitor is the part of prometheus-operator's PodMonitor the manifests
// use; strict decoding rejects any other field.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// securityContextConstraints is the part of OpenShift's SCC the manifests
// use; strict decoding rejects any other field.
type securityContextConstraints struct {
	metav1.TypeMeta                 `json:",inline"`
	metav1.ObjectMeta               `json:"metadata"`
	AllowHostNetwork                bool                `json:"allowHostNetwork"`
	AllowHostPorts                  bool                `json:"allowHostPorts"`
	AllowHostDirVolumePlugin        bool                `json:"allowHostDirVolumePlugin"`
	AllowHostIPC                    bool                `json:"allowHostIPC"`
	AllowHostPID                    bool                `json:"allowHostPID"`
	AllowPrivilegedContainer        bool                `json:"allowPrivilegedContainer"`
	AllowPrivilegeEscalation        *bool               `json:"allowPrivilegeEscalation"`
	DefaultAllowPrivilegeEscalation *bool               `json:"defaultAllowPrivilegeEscalation"`
	AllowedCapabilities             []corev1.Capability `json:"allowedCapabilities"`
	RequiredDropCapabilities        []corev1.Capability `json:"requiredDropCapabilities"`
	ReadOnlyRootFilesystem          bool                `json:"readOnlyRootFilesystem"`
	RunAsUser                       struct {
		Type string `json:"type"`
	} `json:"runAsUser"`
	SELinuxContext struct {
		Type string `json:"type"`
	} `json:"seLinuxContext"`
	FSGroup struct {
		Type string `json:"type"`
	} `json:"fsGroup"`
	SupplementalGroups struct {
		Type string `json:"type"`
	} `json:"supplementalGroups"`
	SeccompProfiles []string `json:"seccompProfiles"`
	Volumes         []string `json:"volumes"`
	Users           []string `json:"users"`
	Groups          []string `json:"groups"`
}

// prometheusRule is the part of prometheus-operator's PrometheusRule the
// manifests use; strict decoding rejects any other field.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

// ruleGroup is a Prometheus rule group, as in a rules file.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"rules"`
}

// newObject returns an empty typed object for apiVersion/kind, or an error
// for a kind no manifest here should have.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ResourceQuota":
		return &corev1.ResourceQuota{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "batch/v1/Job":
		return &batchv1.Job{}, nil
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}, nil
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}, nil
	case "monitoring.coreos.com/v1/PodMonitor":
		return &podMonitor{}, nil
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &prometheusRule{}, nil
	case "security.openshift.io/v1/SecurityContextConstraints":
		return &securityContextConstraints{}, nil
	case "kustomize.config.k8s.io/v1beta1/Kustomization",
		"kustomize.config.k8s.io/v1alpha1/Component":
		return &types.Kustomization{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion %q kind %q", apiVersion, kind)
}

// decodeStrict decodes one YAML document into its typed object: unknown
// fields, duplicate fields and wrong types are errors.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("reading apiVersion and kind: %w", err)
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", tm.Kind, err)
	}
	return obj, nil
}

// documents splits a YAML stream on "---" lines, dropping empty documents.
func documents(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^[ \t]*#.*$`).ReplaceAllString(d, "")) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// files returns the paths under deploy/ whose names end in one of exts.
func files(t *testing.T, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && slices.Contains(exts, filepath.Ext(path)) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no %v files under deploy/", exts)
	}
	return out
}

// docs lists the repository's Markdown outside deploy/: the top-level
// pages and everything under docs/.
func docs(t *testing.T) []string {
	t.Helper()
	out, err := filepath.Glob("../*.md")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir("../docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Ext(path) == ".md" {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no Markdown found outside deploy/")
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	for _, path := range files(t, ".yaml", ".yml") {
		if path == promtoolTests {
			continue
		}
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			docs := documents(data)
			if len(docs) == 0 {
				t.Fatal("no YAML document")
			}
			for i, doc := range docs {
				if _, err := decodeStrict(doc); err != nil {
					t.Errorf("document %d: %v", i, err)
				}
			}
		})
	}
}

// TestDecodeStrictRejects shows the decoder used above can fail.
func TestDecodeStrictRejects(t *testing.T) {
	tests := []struct {
		name string
		doc  string
	}{
		{name: "unknown field", doc: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n"},
		{name: "wrong type", doc: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: two}\n"},
		{name: "duplicate field", doc: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {A: a, A: b}\n"},
		{name: "pod field misplaced", doc: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      privileged: true\n"},
		{name: "unknown kind", doc: "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n"},
		{name: "unknown kustomization field", doc: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeStrict([]byte(tt.doc)); err == nil {
				t.Errorf("decodeStrict(%q) = nil error, want one", tt.doc)
			}
		})
	}
}

// built is the strictly decoded output of one kustomization.
type built struct {
	deployments  []*appsv1.Deployment
	daemonSets   []*appsv1.DaemonSet
	jobs         []*batchv1.Job
	configMaps   map[string]*corev1.ConfigMap
	accounts     map[string]*corev1.ServiceAccount
	services     []*corev1.Service
	quotas       []*corev1.ResourceQuota
	roles        map[string]*rbacv1.Role
	roleBindings []*rbacv1.RoleBinding
	podMonitors  []*podMonitor
	rules        []*prometheusRule
	sccs         map[string]*securityContextConstraints
	namespaces   []*corev1.Namespace
	// namespaced lists "Kind/name" with each object's namespace.
	namespaced map[string]string
}

func build(t *testing.T, dir string) *built {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b := &built{
		configMaps: map[string]*corev1.ConfigMap{},
		accounts:   map[string]*corev1.ServiceAccount{},
		roles:      map[string]*rbacv1.Role{},
		sccs:       map[string]*securityContextConstraints{},
		namespaced: map[string]string{},
	}
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("%s: built %s/%s: %v", dir, r.GetKind(), r.GetName(), err)
		}
		if r.GetKind() != "Namespace" {
			b.namespaced[r.GetKind()+"/"+r.GetName()] = r.GetNamespace()
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			b.deployments = append(b.deployments, o)
		case *appsv1.DaemonSet:
			b.daemonSets = append(b.daemonSets, o)
		case *batchv1.Job:
			b.jobs = append(b.jobs, o)
		case *corev1.ConfigMap:
			b.configMaps[o.Name] = o
		case *corev1.ServiceAccount:
			b.accounts[o.Name] = o
		case *corev1.Service:
			b.services = append(b.services, o)
		case *corev1.ResourceQuota:
			b.quotas = append(b.quotas, o)
		case *rbacv1.Role:
			b.roles[o.Name] = o
		case *rbacv1.RoleBinding:
			b.roleBindings = append(b.roleBindings, o)
		case *podMonitor:
			b.podMonitors = append(b.podMonitors, o)
		case *prometheusRule:
			b.rules = append(b.rules, o)
		case *securityContextConstraints:
			b.sccs[o.Name] = o
		case *corev1.Namespace:
			b.namespaces = append(b.namespaces, o)
		default:
			t.Fatalf("%s: unexpected object %T in the build", dir, obj)
		}
	}
	return b
}

// workload returns the single workload's pod template and labels.
func (b *built) workload(t *testing.T) (kind string, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	switch {
	case len(b.deployments) == 1 && len(b.daemonSets) == 0:
		return "Deployment", b.deployments[0].Spec.Template
	case len(b.daemonSets) == 1 && len(b.deployments) == 0:
		return "DaemonSet", b.daemonSets[0].Spec.Template
	}
	t.Fatalf("want exactly one Deployment or DaemonSet, got %d and %d", len(b.deployments), len(b.daemonSets))
	return "", corev1.PodTemplateSpec{}
}

// kustomizations returns the directories that hold a Kustomization (not a
// Component).
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, path := range files(t, ".yaml") {
		if filepath.Base(path) != "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatal(err)
		}
		if tm.Kind == "Kustomization" {
			dirs = append(dirs, filepath.Dir(path))
		}
	}
	return dirs
}

func TestEveryKustomizationBuilds(t *testing.T) {
	want := []string{"base", "cleanup/base", "cleanup/kubernetes", "cleanup/node", "overlays/daemonset",
		"overlays/kubernetes", "overlays/kubernetes-podmonitor", "overlays/openshift"}
	got := kustomizations(t)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kustomizations (-want +got):\n%s", diff)
	}
	for _, dir := range got {
		t.Run(dir, func(t *testing.T) {
			b := build(t, dir)
			for obj, ns := range b.namespaced {
				if ns != namespace {
					t.Errorf("%s in namespace %q, want %q", obj, ns, namespace)
				}
			}
			if strings.HasPrefix(dir, "cleanup/") {
				checkCleanup(t, b, dir)
				return
			}
			checkWorkload(t, b)
		})
	}
}

// container returns the pod's single container.
func container(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	return spec.Containers[0]
}

func privileged(c corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// envFromConfig reports whether c takes its environment from ipfailover-config.
func envFromConfig(c corev1.Container) bool {
	for _, e := range c.EnvFrom {
		if e.ConfigMapRef != nil && e.ConfigMapRef.Name == configMap {
			return true
		}
	}
	return false
}

// hostPaths maps mount paths to the host paths mounted there.
func hostPaths(spec corev1.PodSpec, c corev1.Container) map[string]string {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		if v, ok := vols[m.Name]; ok && v.HostPath != nil {
			out[m.MountPath] = v.HostPath.Path
		}
	}
	return out
}

func checkProbe(t *testing.T, name string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: want an httpGet probe on %s, got %+v", name, path, p)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.IntValue() != metricsPort {
		t.Errorf("%s: probe %s on port %s, want %s on %d", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, metricsPort)
	}
}

func checkWorkload(t *testing.T, b *built) {
	kind, tmpl := b.workload(t)
	spec := tmpl.Spec
	c := container(t, spec)
	if !spec.HostNetwork {
		t.Errorf("%s: hostNetwork is false", kind)
	}
	checkLeastPrivilege(t, kind, c, podCapabilities)
	checkNodeAgent(t, kind, spec, c)
	if c.Image != image {
		t.Errorf("%s: image %q, want %q", kind, c.Image, image)
	}
	checkProbe(t, kind+" liveness", c.LivenessProbe, "/healthz")
	checkProbe(t, kind+" readiness", c.ReadinessProbe, "/readyz")
	if !envFromConfig(c) {
		t.Errorf("%s: no envFrom configMapRef %s", kind, configMap)
	}
	cm, ok := b.configMaps[configMap]
	if !ok {
		t.Fatalf("ConfigMap %s missing from the build", configMap)
	}
	if cm.Data["OPENSHIFT_HA_VIRTUAL_IPS"] == "" {
		t.Errorf("ConfigMap %s: OPENSHIFT_HA_VIRTUAL_IPS is required", configMap)
	}
	if got := cm.Data["OPENSHIFT_HA_METRICS_ADDRESS"]; got != fmt.Sprintf(":%d", metricsPort) {
		t.Errorf("OPENSHIFT_HA_METRICS_ADDRESS = %q, the probes want :%d", got, metricsPort)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "metrics" && p.ContainerPort == metricsPort && p.HostPort == metricsPort
	}) {
		t.Errorf("%s: no container port metrics %d (hostPort %d)", kind, metricsPort, metricsPort)
	}
	if hp := hostPaths(spec, c); len(hp) > 0 {
		t.Errorf("%s: host paths %v, want none (ip_vs and /etc/sysconfig are opt-in components)", kind, hp)
	}
	checkWritable(t, kind, spec, c, "/etc/keepalived", "/run", "/tmp")
	checkScriptVolume(t, b, spec, c)
	if _, ok := b.accounts[spec.ServiceAccountName]; !ok {
		t.Errorf("%s: ServiceAccount %q missing from the build", kind, spec.ServiceAccountName)
	}
	for _, d := range b.deployments {
		checkDeployment(t, d, cm)
	}
	for _, ds := range b.daemonSets {
		u := ds.Spec.UpdateStrategy
		if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
			u.RollingUpdate.MaxSurge.String() != "0" || u.RollingUpdate.MaxUnavailable.String() != "1" {
			t.Errorf("DaemonSet updateStrategy %+v, want RollingUpdate maxSurge 0 maxUnavailable 1", u)
		}
	}
	for _, s := range b.services {
		checkService(t, s, tmpl.Labels)
	}
	for _, pm := range b.podMonitors {
		if !selects(pm.Spec.Selector.MatchLabels, tmpl.Labels) {
			t.Errorf("PodMonitor %s selects %v, the pods have %v", pm.Name, pm.Spec.Selector.MatchLabels, tmpl.Labels)
		}
		if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port != "metrics" ||
			pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
			t.Errorf("PodMonitor %s endpoints %+v, want port metrics path /metrics", pm.Name, pm.Spec.PodMetricsEndpoints)
		}
	}
	checkPeers(t, b, kind, spec, c, cm)
	if len(b.sccs) > 0 {
		checkSCC(t, b, spec.ServiceAccountName)
	}
}

// peersRole is the Role of OPENSHIFT_HA_UNICAST_PEERS_FROM=pods,
// eventsRole the one of the Events on the pods.
const (
	peersRole  = "ipfailover-peers"
	eventsRole = "ipfailover-events"
)

// checkPeers: with OPENSHIFT_HA_UNICAST_PEERS_FROM=pods the pod mounts its
// service account token, has its own name and namespace from the Downward
// API, and its ServiceAccount is bound to a Role of this namespace that
// allows get, list, watch and patch on pods and nothing more (a ClusterRole
// would not even decode here), and to one that allows creating and
// patching events.k8s.io events and nothing more. Without it, no token
// and no such Roles.
func checkPeers(t *testing.T, b *built, kind string, spec corev1.PodSpec, c corev1.Container, cm *corev1.ConfigMap) {
	t.Helper()
	token := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken
	_, hasRole := b.roles[peersRole]
	_, hasEvents := b.roles[eventsRole]
	if cm.Data["OPENSHIFT_HA_UNICAST_PEERS_FROM"] != "pods" {
		if token || hasRole || hasEvents {
			t.Errorf("%s: multicast, but the token is mounted (%v) or the Role %s (%v) or %s (%v) is there", kind, token, peersRole, hasRole, eventsRole, hasEvents)
		}
		return
	}
	if !token {
		t.Errorf("%s: OPENSHIFT_HA_UNICAST_PEERS_FROM=pods needs automountServiceAccountToken: true", kind)
	}
	for name, field := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("%s: env %s is not the Downward API's %s", kind, name, field)
		}
	}
	checkRole(t, b, peersRole, spec.ServiceAccountName, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}}})
	checkRole(t, b, eventsRole, spec.ServiceAccountName, []rbacv1.PolicyRule{{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}})
}

// checkRole: the Role name of the build allows want and nothing more, and
// a RoleBinding gives it to account.
func checkRole(t *testing.T, b *built, name, account string, want []rbacv1.PolicyRule) {
	t.Helper()
	role, ok := b.roles[name]
	if !ok {
		t.Errorf("Role %s missing from the build", name)
		return
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("Role %s rules (-want +got):\n%s", name, diff)
	}
	bound := slices.ContainsFunc(b.roleBindings, func(rb *rbacv1.RoleBinding) bool {
		return rb.RoleRef.Kind == "Role" && rb.RoleRef.Name == name && slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == account && subjectNamespace(rb, s) == namespace
		})
	})
	if !bound {
		t.Errorf("no RoleBinding gives ServiceAccount %s the Role %s", account, name)
	}
}

// checkNodeAgent: the pod has the priority class, and its container the
// requests and limits, of a node agent on a busy node.
func checkNodeAgent(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if spec.PriorityClassName != priorityClass {
		t.Errorf("%s: priorityClassName %q, want %s", what, spec.PriorityClassName, priorityClass)
	}
	checkResources(t, what+" requests", c.Resources.Requests, podRequests)
	checkResources(t, what+" limits", c.Resources.Limits, podLimits)
}

// checkResources: got has exactly the resources of want, in equal
// quantities (1Gi and 1024Mi are equal).
func checkResources(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if !maps.EqualFunc(got, want, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }) {
		t.Errorf("%s %s, want %s", what, quantities(got), quantities(want))
	}
}

// quantities formats l as "cpu=100m memory=64Mi".
func quantities(l corev1.ResourceList) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(l)) {
		q := l[name]
		out = append(out, fmt.Sprintf("%s=%s", name, q.String()))
	}
	return strings.Join(out, " ")
}

// checkAdmitted: a ResourceQuota of the build admits the pod's priority
// class (a cluster may limit it to namespaces that have one) without
// limiting anything: it counts only pods of that class, far more than any
// deployment has.
func checkAdmitted(t *testing.T, b *built, what string, spec corev1.PodSpec) {
	t.Helper()
	admits := slices.ContainsFunc(b.quotas, func(q *corev1.ResourceQuota) bool {
		sel := q.Spec.ScopeSelector
		if len(q.Spec.Scopes) > 0 || sel == nil || len(sel.MatchExpressions) != 1 {
			return false
		}
		e := sel.MatchExpressions[0]
		pods, ok := q.Spec.Hard[corev1.ResourcePods]
		return e.ScopeName == corev1.ResourceQuotaScopePriorityClass && e.Operator == corev1.ScopeSelectorOpIn &&
			slices.Contains(e.Values, spec.PriorityClassName) && len(q.Spec.Hard) == 1 && ok && pods.Cmp(resource.MustParse("1M")) >= 0
	})
	if !admits {
		t.Errorf("%s: no ResourceQuota of the build admits priority class %q and counts only its pods, with room", what, spec.PriorityClassName)
	}
}

// checkLeastPrivilege: not privileged, no escalation, every capability
// dropped but want, read-only root, RuntimeDefault seccomp.
func checkLeastPrivilege(t *testing.T, what string, c corev1.Container, want []corev1.Capability) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", what)
		return
	}
	if privileged(c) {
		t.Errorf("%s: container is privileged", what)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation not false", what)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem not true", what)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile %v, want RuntimeDefault", what, sc.SeccompProfile)
	}
	if sc.Capabilities == nil {
		t.Errorf("%s: no capabilities", what)
		return
	}
	if diff := cmp.Diff([]corev1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
		t.Errorf("%s: capabilities dropped (-want +got):\n%s", what, diff)
	}
	if diff := cmp.Diff(want, sc.Capabilities.Add); diff != "" {
		t.Errorf("%s: capabilities added (-want +got):\n%s", what, diff)
	}
}

// checkWritable: with a read-only root, each directory the program or
// keepalived writes to is an emptyDir.
func checkWritable(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container, dirs ...string) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, d := range dirs {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == d })
		if i < 0 || vols[c.VolumeMounts[i].Name].EmptyDir == nil || c.VolumeMounts[i].ReadOnly {
			t.Errorf("%s: %s is not a writable emptyDir", what, d)
		}
	}
}

func checkScriptVolume(t *testing.T, b *built, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/keepalive" })
	if i < 0 {
		t.Errorf("nothing mounted at /etc/keepalive")
		return
	}
	j := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[i].Name })
	if j < 0 || spec.Volumes[j].ConfigMap == nil {
		t.Errorf("/etc/keepalive is not a ConfigMap volume")
		return
	}
	v := spec.Volumes[j].ConfigMap
	if v.DefaultMode == nil || *v.DefaultMode != 0o755 {
		t.Errorf("/etc/keepalive defaultMode %v, want 0755", v.DefaultMode)
	}
	cm, ok := b.configMaps[v.Name]
	if !ok {
		t.Errorf("check-script ConfigMap %q missing from the build", v.Name)
		return
	}
	for name, script := range cm.Data {
		if !strings.HasPrefix(script, "#!") {
			t.Errorf("check script %s does not start with #!", name)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, cm *corev1.ConfigMap) {
	t.Helper()
	if st := d.Spec.Strategy; st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil ||
		st.RollingUpdate.MaxSurge.String() != "0" || st.RollingUpdate.MaxUnavailable.String() != "1" {
		t.Errorf("Deployment strategy %+v, want RollingUpdate maxSurge 0 maxUnavailable 1", st)
	}
	if d.Spec.Replicas == nil || fmt.Sprint(*d.Spec.Replicas) != cm.Data["OPENSHIFT_HA_REPLICA_COUNT"] {
		t.Errorf("Deployment replicas %v, OPENSHIFT_HA_REPLICA_COUNT %q: must be equal", d.Spec.Replicas, cm.Data["OPENSHIFT_HA_REPLICA_COUNT"])
	}
	labels := d.Spec.Template.Labels
	if !selects(d.Spec.Selector.MatchLabels, labels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, labels)
	}
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("Deployment: want one required pod anti-affinity term, got %+v", a)
	}
	term := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("anti-affinity topologyKey %q, want kubernetes.io/hostname", term.TopologyKey)
	}
	if term.LabelSelector == nil || !selects(term.LabelSelector.MatchLabels, labels) {
		t.Errorf("anti-affinity selector %v does not select the pods %v", term.LabelSelector, labels)
	}
}

func checkService(t *testing.T, s *corev1.Service, podLabels map[string]string) {
	t.Helper()
	if s.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q, want None (headless)", s.Name, s.Spec.ClusterIP)
	}
	if !selects(s.Spec.Selector, podLabels) {
		t.Errorf("Service %s selects %v, the pods have %v", s.Name, s.Spec.Selector, podLabels)
	}
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != metricsPort {
		t.Errorf("Service %s ports %+v, want %d", s.Name, s.Spec.Ports, metricsPort)
	}
}

// checkSCC: the ServiceAccount may use the SCC ipfailover of the build, and
// that SCC allows what the pods need and nothing privileged.
func checkSCC(t *testing.T, b *built, account string) {
	t.Helper()
	granted := map[string]bool{}
	for _, rb := range b.roleBindings {
		if rb.RoleRef.Name == peersRole || rb.RoleRef.Name == eventsRole {
			continue
		}
		bound := slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == account && subjectNamespace(rb, s) == namespace
		})
		role, ok := b.roles[rb.RoleRef.Name]
		if !bound || rb.RoleRef.Kind != "Role" || !ok {
			t.Errorf("RoleBinding %s: subjects %+v roleRef %+v, want ServiceAccount %s/%s bound to a Role in the build",
				rb.Name, rb.Subjects, rb.RoleRef, namespace, account)
			continue
		}
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "security.openshift.io") && slices.Contains(r.Resources, "securitycontextconstraints") &&
				slices.Contains(r.Verbs, "use") {
				for _, n := range r.ResourceNames {
					granted[n] = true
				}
			}
		}
	}
	if diff := cmp.Diff(map[string]bool{"ipfailover": true}, granted); diff != "" {
		t.Errorf("SCCs usable by %s (-want +got):\n%s", account, diff)
	}
	scc, ok := b.sccs["ipfailover"]
	if !ok {
		t.Fatal("SecurityContextConstraints ipfailover missing from the build")
	}
	if !scc.AllowHostNetwork || !scc.AllowHostPorts {
		t.Error("SCC: the host network and the metrics hostPort must be allowed")
	}
	if scc.AllowPrivilegedContainer || scc.AllowHostDirVolumePlugin || scc.AllowHostIPC || scc.AllowHostPID ||
		scc.AllowPrivilegeEscalation == nil || *scc.AllowPrivilegeEscalation {
		t.Errorf("SCC allows more than the pods need: %+v", scc)
	}
	if diff := cmp.Diff(podCapabilities, scc.AllowedCapabilities); diff != "" {
		t.Errorf("SCC allowedCapabilities (-pod +scc):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Capability{"ALL"}, scc.RequiredDropCapabilities); diff != "" {
		t.Errorf("SCC requiredDropCapabilities (-want +got):\n%s", diff)
	}
	if !scc.ReadOnlyRootFilesystem || !slices.Equal(scc.SeccompProfiles, []string{"runtime/default"}) {
		t.Errorf("SCC: readOnlyRootFilesystem %v, seccompProfiles %v; want true and [runtime/default]", scc.ReadOnlyRootFilesystem, scc.SeccompProfiles)
	}
	if diff := cmp.Diff([]string{"configMap", "emptyDir"}, scc.Volumes); diff != "" {
		t.Errorf("SCC volumes (-want +got):\n%s", diff)
	}
}

// cleanupName is the cleanup DaemonSet's name (and the single-node
// Job's prefix).
const cleanupName = "remove-ipfailover"

// cleanupContainer is the container that does a cleanup pod's work: the
// DaemonSet's init container, the Job's container.
func cleanupContainer(t *testing.T, what string, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if strings.HasPrefix(what, "DaemonSet") {
		if len(spec.InitContainers) != 1 {
			t.Fatalf("%s: %d init containers, want the one that cleans up", what, len(spec.InitContainers))
		}
		return spec.InitContainers[0]
	}
	return container(t, spec)
}

// checkCleanup: the cleanup of cleanup/base and cleanup/kubernetes is a
// DaemonSet on every Linux node, every taint tolerated, so that it reaches
// every node a pod ran on whatever the workload's replicas and node
// selector; its init container removes, with NET_ADMIN alone, what the
// pods added; its other container only idles. cleanup/node is one Job pod
// on a node named when it is created.
func checkCleanup(t *testing.T, b *built, dir string) {
	if len(b.configMaps) != 0 {
		t.Errorf("cleanup must use the deployment's ConfigMap, not bring its own: %v", b.configMaps)
	}
	var what string
	var spec corev1.PodSpec
	if dir == "cleanup/node" {
		if len(b.jobs) != 1 || len(b.deployments)+len(b.daemonSets) != 0 {
			t.Fatalf("single-node cleanup: want one Job and no workload, got %d jobs", len(b.jobs))
		}
		j := b.jobs[0]
		what, spec = "Job "+j.Name, j.Spec.Template.Spec
		if j.Spec.Completions != nil && *j.Spec.Completions != 1 || j.Spec.CompletionMode != nil || spec.Affinity != nil {
			t.Errorf("single-node Job: completions %s, mode %s, affinity %+v; want 1 pod, no index, no affinity",
				deref(j.Spec.Completions), deref(j.Spec.CompletionMode), spec.Affinity)
		}
		if spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("Job: restartPolicy %q, want Never", spec.RestartPolicy)
		}
	} else {
		if len(b.daemonSets) != 1 || b.daemonSets[0].Name != cleanupName || len(b.deployments)+len(b.jobs) != 0 {
			t.Fatalf("cleanup: want the DaemonSet %s alone, got %d DaemonSets, %d Jobs", cleanupName, len(b.daemonSets), len(b.jobs))
		}
		ds := b.daemonSets[0]
		what, spec = "DaemonSet "+ds.Name, ds.Spec.Template.Spec
		if diff := cmp.Diff(map[string]string{"kubernetes.io/os": "linux"}, spec.NodeSelector); diff != "" {
			t.Errorf("cleanup nodeSelector (-want +got): every Linux node\n%s", diff)
		}
		if spec.Affinity != nil {
			t.Errorf("cleanup affinity %+v: it must reach every node", spec.Affinity)
		}
		idle := container(t, spec)
		checkLeastPrivilege(t, what+" (idle)", idle, nil)
	}
	c := cleanupContainer(t, what, spec)
	if !spec.HostNetwork {
		t.Errorf("%s: hostNetwork is false", what)
	}
	if diff := cmp.Diff([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, spec.Tolerations); diff != "" {
		t.Errorf("%s tolerations (-want +got): every taint, so that cordoned and tainted nodes are cleaned too\n%s", what, diff)
	}
	checkLeastPrivilege(t, what, c, jobCapabilities)
	checkCleanupScheduling(t, what, spec, c)
	checkWritable(t, what, spec, c, "/run", "/tmp")
	if hp := hostPaths(spec, c); len(hp) > 0 {
		t.Errorf("%s: host paths %v, want none", what, hp)
	}
	if !envFromConfig(c) {
		t.Errorf("%s: no envFrom configMapRef %s", what, configMap)
	}
	if diff := cmp.Diff([]string{cleanupPath}, c.Command); diff != "" {
		t.Errorf("%s command (-want +got):\n%s", what, diff)
	}
	if c.Image != image {
		t.Errorf("%s: image %q, want %q", what, c.Image, image)
	}
}

// checkCleanupScheduling: the cleanup Job runs once, after the pods are
// gone, holds no VIP and is retried, so it takes no priority class (it
// must not preempt anyone's pods); it requests no more than a pod, so it
// fits where a pod ran.
func checkCleanupScheduling(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if spec.PriorityClassName != "" {
		t.Errorf("%s: priorityClassName %q, want none", what, spec.PriorityClassName)
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := c.Resources.Requests[name]
		if want := podRequests[name]; !ok || q.Cmp(want) > 0 {
			t.Errorf("%s: requests %s, want a %s request of at most the pod's (%s)", what, quantities(c.Resources.Requests), name, quantities(podRequests))
		}
	}
}

// TestNothingToEditPerNode: no manifest carries a placeholder to replace.
func TestNothingToEditPerNode(t *testing.T) {
	for _, path := range files(t, ".yaml") {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("NODE_NAME")) {
			t.Errorf("%s has the NODE_NAME placeholder", path)
		}
	}
}

// subjectNamespace is the namespace RBAC gives a ServiceAccount subject:
// its own, or, when empty, the RoleBinding's.
func subjectNamespace(rb *rbacv1.RoleBinding, s rbacv1.Subject) string {
	if s.Namespace == "" {
		return rb.Namespace
	}
	return s.Namespace
}

// selects reports whether every selector label is on the object.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestDaemonSetKeepsTheDeploymentsPod: the daemonset overlay repeats the
// pod of the kubernetes overlay (the base's, on every Linux node: a plain
// cluster has no worker label); only scheduling (anti-affinity) may differ.
func TestDaemonSetKeepsTheDeploymentsPod(t *testing.T) {
	_, dep := build(t, "overlays/kubernetes").workload(t)
	_, ds := build(t, "overlays/daemonset").workload(t)
	dep.Spec.Affinity = nil
	if diff := cmp.Diff(dep, ds); diff != "" {
		t.Errorf("DaemonSet pod differs from the Deployment's (-deployment +daemonset):\n%s", diff)
	}
}

// TestCleanupUsesTheWorkloadsConfig: the cleanup reads the ConfigMap the
// pods read, as their ServiceAccount.
func TestCleanupUsesTheWorkloadsConfig(t *testing.T) {
	_, tmpl := build(t, "base").workload(t)
	ds := build(t, "cleanup/base").daemonSets[0].Spec.Template.Spec
	w, c := container(t, tmpl.Spec), cleanupContainer(t, "DaemonSet", ds)
	if diff := cmp.Diff(w.EnvFrom, c.EnvFrom); diff != "" {
		t.Errorf("envFrom (-workload +cleanup):\n%s", diff)
	}
	if tmpl.Spec.ServiceAccountName != ds.ServiceAccountName {
		t.Errorf("service accounts differ: %q and %q", tmpl.Spec.ServiceAccountName, ds.ServiceAccountName)
	}
}

var variableName = regexp.MustCompile(`\b(?:OPENSHIFT_HA|HA|KEEPALIVED)_[A-Z0-9_]+`)

// TestVariableNamesAreKnown: every variable a manifest, a comment or the
// documentation (the Markdown here, at the top of the repository and under
// docs/) names is one the program reads.
func TestVariableNamesAreKnown(t *testing.T) {
	known := config.Variables()
	seen := 0
	for _, path := range append(files(t, ".yaml", ".md"), docs(t)...) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			for _, name := range variableName.FindAllString(string(line), -1) {
				seen++
				if !slices.Contains(known, name) {
					t.Errorf("%s:%d: %s is not in config.Variables()", path, i+1, name)
				}
			}
		}
	}
	// And what reaches the pods: ConfigMap keys and env names in every build.
	for _, dir := range kustomizations(t) {
		b := build(t, dir)
		for _, cm := range b.configMaps {
			if cm.Name != configMap {
				continue
			}
			for k := range cm.Data {
				seen++
				if !slices.Contains(known, k) {
					t.Errorf("%s: ConfigMap %s key %s is not in config.Variables()", dir, cm.Name, k)
				}
			}
		}
	}
	if seen == 0 {
		t.Error("no variable names found: the scan is broken")
	}
}

// TestNamespaceOverride: a user's overlay that moves everything to another
// namespace keeps the SCC binding pointed at the moved ServiceAccount.
func TestNamespaceOverride(t *testing.T) {
	overlay, err := filepath.Abs("overlays/openshift")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, overlay)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: failover-b\nresources:\n  - %s\n", rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	b := build(t, dir)
	if len(b.namespaces) != 1 || b.namespaces[0].Name != "failover-b" {
		t.Errorf("want the Namespace object renamed to failover-b, got %d of them", len(b.namespaces))
	}
	for obj, ns := range b.namespaced {
		if ns != "failover-b" {
			t.Errorf("%s in namespace %q, want failover-b", obj, ns)
		}
	}
	for _, rb := range b.roleBindings {
		for _, s := range rb.Subjects {
			if ns := subjectNamespace(rb, s); ns != "failover-b" {
				t.Errorf("RoleBinding %s subject %s/%s, want namespace failover-b", rb.Name, ns, s.Name)
			}
		}
	}
}

// overlay writes a user's overlay of the given kustomizations and
// components (paths under deploy/) and returns its directory.
func overlay(t *testing.T, extra string, resources, components []string) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	for _, list := range []struct {
		key   string
		paths []string
	}{{"resources", resources}, {"components", components}} {
		if len(list.paths) == 0 {
			continue
		}
		b.WriteString(list.key + ":\n")
		for _, p := range list.paths {
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			rel, err := filepath.Rel(dir, abs)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("  - " + rel + "\n")
		}
	}
	b.WriteString(extra)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// podsOf returns the pod templates of a build's workloads and Jobs.
func podsOf(b *built) map[string]corev1.PodTemplateSpec {
	pods := map[string]corev1.PodTemplateSpec{}
	for _, d := range b.deployments {
		pods["Deployment "+d.Name] = d.Spec.Template
	}
	for _, d := range b.daemonSets {
		pods["DaemonSet "+d.Name] = d.Spec.Template
	}
	for _, j := range b.jobs {
		pods["Job "+j.Name] = j.Spec.Template
	}
	return pods
}

// TestComponents: each opt-in component changes what it says, in the
// workloads, the cleanup Job and the OpenShift SCC alike, and every host
// path it adds copes with a node where the path does not exist.
func TestComponents(t *testing.T) {
	bases := []string{"overlays/openshift", "overlays/kubernetes", "overlays/daemonset", "cleanup/base"}
	tests := []struct {
		component string
		check     func(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container)
		scc       func(t *testing.T, scc *securityContextConstraints)
	}{
		{
			component: "components/privileged",
			check: func(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) {
				if !privileged(c) || c.SecurityContext.AllowPrivilegeEscalation == nil || !*c.SecurityContext.AllowPrivilegeEscalation {
					t.Errorf("%s: %+v, want privileged with privilege escalation allowed", what, c.SecurityContext)
				}
			},
		},
		{
			component: "components/ip-vs",
			check: func(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) {
				if !slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_MODULE") {
					t.Errorf("%s: capabilities %v, want SYS_MODULE added", what, c.SecurityContext.Capabilities.Add)
				}
				if hp := hostPaths(spec, c); hp["/lib/modules"] != "/lib/modules" {
					t.Errorf("%s: host paths %v, want /lib/modules", what, hp)
				}
			},
			scc: func(t *testing.T, scc *securityContextConstraints) {
				if !slices.Contains(scc.AllowedCapabilities, "SYS_MODULE") || !scc.AllowHostDirVolumePlugin || !slices.Contains(scc.Volumes, "hostPath") {
					t.Errorf("SCC with ip-vs: %+v, want SYS_MODULE and hostPath volumes allowed", scc)
				}
			},
		},
		{
			component: "components/host-sysconfig",
			check: func(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) {
				if strings.HasPrefix(what, "Job") || what == "DaemonSet "+cleanupName {
					return // the cleanup does not read KEEPALIVED_OPTIONS
				}
				if hp := hostPaths(spec, c); hp["/etc/sysconfig"] != "/etc/sysconfig" {
					t.Errorf("%s: host paths %v, want /etc/sysconfig", what, hp)
				}
			},
			scc: func(t *testing.T, scc *securityContextConstraints) {
				if !scc.AllowHostDirVolumePlugin || !slices.Contains(scc.Volumes, "hostPath") {
					t.Errorf("SCC with host-sysconfig: %+v, want hostPath volumes allowed", scc)
				}
			},
		},
	}
	for _, tt := range tests {
		for _, base := range bases {
			t.Run(tt.component+"+"+base, func(t *testing.T) {
				b := build(t, overlay(t, "", []string{base}, []string{tt.component}))
				pods := podsOf(b)
				if len(pods) != 1 {
					t.Fatalf("want one pod template, got %v", slices.Collect(maps.Keys(pods)))
				}
				for what, pod := range pods {
					cleanup := strings.HasPrefix(what, "Job") || what == "DaemonSet "+cleanupName
					c := container(t, pod.Spec)
					if cleanup {
						c = cleanupContainer(t, what, pod.Spec)
					}
					tt.check(t, what, pod.Spec, c)
					if cleanup {
						checkCleanupScheduling(t, what, pod.Spec, c)
					} else {
						checkNodeAgent(t, what, pod.Spec, c)
					}
					for _, v := range pod.Spec.Volumes {
						if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate) {
							t.Errorf("%s: hostPath %s has type %s, want DirectoryOrCreate (the path may be missing on a node)", what, v.HostPath.Path, deref(v.HostPath.Type))
						}
					}
				}
				if scc, ok := b.sccs["ipfailover"]; ok && tt.scc != nil {
					tt.scc(t, scc)
				}
				if tt.component == "components/privileged" && base == "overlays/openshift" {
					if got := b.roles["ipfailover-scc"].Rules[0].ResourceNames; !slices.Equal(got, []string{"privileged"}) {
						t.Errorf("privileged on OpenShift: the Role grants %v, want the privileged SCC", got)
					}
				}
			})
		}
	}
}

// TestCriticalQuotaComponent: components/critical-quota admits every
// workload's priority class, in the workload's namespace (deploy/'s, or
// the one an overlay sets), and changes nothing else; no overlay has a
// quota without it.
func TestCriticalQuotaComponent(t *testing.T) {
	for _, base := range []string{"overlays/openshift", "overlays/kubernetes", "overlays/kubernetes-podmonitor", "overlays/daemonset"} {
		t.Run(base, func(t *testing.T) {
			without := build(t, base)
			if len(without.quotas) > 0 {
				t.Errorf("%s has a ResourceQuota without the component", base)
			}
			b := build(t, overlay(t, "", []string{base}, []string{"components/critical-quota"}))
			if len(b.quotas) != 1 || b.namespaced["ResourceQuota/"+b.quotas[0].Name] != namespace {
				t.Fatalf("want one ResourceQuota in namespace %s, got %d", namespace, len(b.quotas))
			}
			kind, tmpl := b.workload(t)
			checkAdmitted(t, b, kind, tmpl.Spec)
			if diff := cmp.Diff(podsOf(without), podsOf(b)); diff != "" {
				t.Errorf("the component changes the pods (-without +with):\n%s", diff)
			}
			checkWorkload(t, b)
			moved := build(t, overlay(t, "namespace: failover-b\n", []string{base}, []string{"components/critical-quota"}))
			if len(moved.quotas) != 1 || moved.namespaced["ResourceQuota/"+moved.quotas[0].Name] != "failover-b" {
				t.Errorf("an overlay's namespace failover-b does not move the ResourceQuota")
			}
		})
	}
}

// TestSCCComponentInAUsersOverlay: components/openshift-scc added, as the
// README says, to a user's overlay of overlays/daemonset (which sets no
// namespace) grants the SCC in the pods' namespace.
func TestSCCComponentInAUsersOverlay(t *testing.T) {
	b := build(t, overlay(t, "", []string{"overlays/daemonset"}, []string{"components/openshift-scc"}))
	for obj, ns := range b.namespaced {
		if ns != namespace && !strings.HasPrefix(obj, "SecurityContextConstraints/") {
			t.Errorf("%s in namespace %q, want %q", obj, ns, namespace)
		}
	}
	checkWorkload(t, b)
}

// TestMulticastComponent: components/multicast takes the peers-from-pods
// mode out of every overlay: the setting, the token, the Role and its
// binding (checkWorkload then checks what multicast needs).
func TestMulticastComponent(t *testing.T) {
	for _, base := range []string{"overlays/openshift", "overlays/kubernetes", "overlays/daemonset"} {
		t.Run(base, func(t *testing.T) {
			b := build(t, overlay(t, "", []string{base}, []string{"components/multicast"}))
			if _, ok := b.configMaps[configMap].Data["OPENSHIFT_HA_UNICAST_PEERS_FROM"]; ok {
				t.Error("OPENSHIFT_HA_UNICAST_PEERS_FROM is still set")
			}
			for _, rb := range b.roleBindings {
				if rb.RoleRef.Name == peersRole {
					t.Errorf("RoleBinding %s still grants %s", rb.Name, peersRole)
				}
			}
			checkWorkload(t, b)
		})
	}
}

// TestNoPrivilegedContainer: outside components/privileged, no
// kustomization builds a privileged container.
func TestNoPrivilegedContainer(t *testing.T) {
	for _, dir := range kustomizations(t) {
		for what, pod := range podsOf(build(t, dir)) {
			for _, c := range pod.Spec.Containers {
				if privileged(c) {
					t.Errorf("%s: %s container %s is privileged", dir, what, c.Name)
				}
			}
		}
	}
}

// deref formats what p points to, or "unset".
func deref[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
