// Package kubeplay runs the manifests under deploy/ for real: kustomize
// builds them, podman kube play runs them on three nodes (network
// namespaces on one bridge, from test/lab), and the test checks what a
// cluster would: the least-privilege security context as the kernel applies
// it, readiness through the manifest's probe, one holder per VIP, a handover
// when a node's pod stops, and the cleanup Job's pod leaving nothing behind.
//
// It needs root, podman, runc, catatonit and a built image, so it runs from
// make image-test (images/image-test.sh), which sets IPFAILOVER_IMAGE; a
// plain go test skips it.
//
// What the test changes in the built manifests is what a user's overlay
// would (image, VIPs, replica counts, the monitored port), plus what podman
// on one host needs where a cluster has one kubelet per node:
//   - the Deployment's and its emptyDirs' names get the node's name, since
//     podman names pods and volumes host-wide;
//   - the container's ports are dropped: podman 4.3 refuses port mappings
//     with host networking, where a kubelet treats them as host ports;
//   - the Downward API variables are dropped: podman refuses
//     metadata.namespace, and the played overlay is multicast (podman has
//     no API server), which reads none.
//
// Everything else (security context, volumes, envFrom, probes, command) is
// played as built.
package kubeplay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/wait"
)

// imageEnv names the image to play; unset skips the test.
const imageEnv = "IPFAILOVER_IMAGE"

var vips = []netip.Addr{
	netip.MustParseAddr("192.0.2.100"),
	netip.MustParseAddr("192.0.2.101"),
	netip.MustParseAddr("192.0.2.102"),
}

// capability numbers of linux/capability.h, for /proc/PID/status.
var capBits = map[corev1.Capability]uint{
	"SETGID": 6, "SETUID": 7, "NET_BIND_SERVICE": 10, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_MODULE": 16,
}

// userOverlay is what a user writes (deploy/README.md, Install): the image,
// the VIPs, the replica count, and here the monitored port (the node's own
// :9650, so the default TCP check passes once the metrics serve).
func userOverlay(base, image string, replicas int, components string) string {
	name, tag := splitImage(image)
	return fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
%simages:
  - name: ipfailover
    newName: %s
    newTag: %s
patches:
  - target: {kind: ConfigMap, name: ipfailover-config}
    patch: |-
      - {op: replace, path: /data/OPENSHIFT_HA_VIRTUAL_IPS, value: "192.0.2.100-102"}
      - {op: replace, path: /data/OPENSHIFT_HA_REPLICA_COUNT, value: "%d"}
      - {op: replace, path: /data/OPENSHIFT_HA_MONITOR_PORT, value: "9650"}
  - target: {kind: Deployment, name: ipfailover}
    patch: |-
      - {op: replace, path: /spec/replicas, value: %d}
  - target: {kind: Job, name: remove-ipfailover}
    patch: |-
      - {op: replace, path: /spec/completions, value: %d}
      - {op: replace, path: /spec/parallelism, value: %d}
`, base, components, name, tag, replicas, replicas, replicas, replicas)
}

func splitImage(image string) (name, tag string) {
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

// build runs kustomize on a user overlay of deploy/<base> and returns the
// YAML documents by kind.
func build(t *testing.T, base, image string, replicas int) map[string][][]byte {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", "deploy", base))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	// podman kube play has no API server: the workload runs multicast.
	var components string
	if strings.HasPrefix(base, "overlays/") {
		mc, err := filepath.Rel(dir, filepath.Join(filepath.Dir(abs), "..", "components", "multicast"))
		if err != nil {
			t.Fatal(err)
		}
		components = "components:\n  - " + mc + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(userOverlay(rel, image, replicas, components)), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of an overlay of %s: %v", base, err)
	}
	out := map[string][][]byte{}
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		out[r.GetKind()] = append(out[r.GetKind()], doc)
	}
	return out
}

func decode(t *testing.T, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatal(err)
	}
}

// forNode is the harness's change for podman: node-suffixed names, no
// ports, no Downward API variables (podman knows metadata.name, not
// metadata.namespace; the multicast pods it plays read neither).
func forNode(spec *corev1.PodSpec, node string) {
	renamed := map[string]string{}
	for i, v := range spec.Volumes {
		if v.EmptyDir != nil {
			renamed[v.Name] = v.Name + "-" + node
			spec.Volumes[i].Name = renamed[v.Name]
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.Ports = nil
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.ValueFrom != nil && e.ValueFrom.FieldRef != nil })
		for j, m := range c.VolumeMounts {
			if n, ok := renamed[m.Name]; ok {
				c.VolumeMounts[j].Name = n
			}
		}
	}
}

// player plays manifests with podman in the lab's node namespaces and
// removes what it played.
type player struct {
	t       *testing.T
	c       *lab.Cluster
	dir     string
	pods    []string
	volumes []string
}

func (p *player) podman(ctx context.Context, n *lab.Node, args ...string) (string, error) {
	out, err := n.Exec(ctx, append([]string{"podman"}, args...)...)
	return string(out), err
}

// play writes docs to a file and runs `podman kube play` on it in n's
// network namespace, as hostNetwork pods there see n's eth0.
func (p *player) play(ctx context.Context, n *lab.Node, name string, docs ...[]byte) {
	p.t.Helper()
	// A pod of that name left by an earlier, interrupted run.
	_, _ = p.podman(ctx, n, "pod", "rm", "-f", "-t", "0", name+"-pod-0")
	_, _ = p.podman(ctx, n, "pod", "rm", "-f", "-t", "0", name)
	file := filepath.Join(p.dir, name+".yaml")
	if err := os.WriteFile(file, bytes.Join(docs, []byte("---\n")), 0o644); err != nil {
		p.t.Fatal(err)
	}
	if out, err := p.podman(ctx, n, "kube", "play", file); err != nil {
		p.t.Fatalf("podman kube play %s on %s: %v\n%s", name, n.Name, err, out)
	}
}

func (p *player) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, pod := range p.pods {
		if out, err := exec.CommandContext(ctx, "podman", "pod", "rm", "-f", "-t", "5", pod).CombinedOutput(); err != nil {
			p.t.Logf("podman pod rm %s: %v: %s", pod, err, out)
		}
	}
	for _, v := range p.volumes {
		if out, err := exec.CommandContext(ctx, "podman", "volume", "rm", "-f", v).CombinedOutput(); err != nil {
			p.t.Logf("podman volume rm %s: %v: %s", v, err, out)
		}
	}
}

// inspect reads one field of a container with podman inspect's template.
func inspect(ctx context.Context, t *testing.T, ctr, format string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "podman", "inspect", "--format", format, ctr).CombinedOutput()
	if err != nil {
		t.Fatalf("podman inspect %s: %v: %s", ctr, err, out)
	}
	return strings.TrimSpace(string(out))
}

// statusField reads a field of /proc/PID/status.
func statusField(t *testing.T, pid, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%s/status has no %s", pid, field)
	return ""
}

// checkSecurity: the running container has exactly the built security
// context, as the kernel applies it: the effective, permitted and bounding
// capabilities are the ones added (every other dropped), no_new_privs is
// set (allowPrivilegeEscalation: false), a seccomp filter is on
// (RuntimeDefault), the root filesystem is read-only, nothing privileged.
func checkSecurity(ctx context.Context, t *testing.T, ctr string, sc *corev1.SecurityContext) {
	t.Helper()
	var want uint64
	for _, c := range sc.Capabilities.Add {
		bit, ok := capBits[c]
		if !ok {
			t.Fatalf("capability %s: add its number to capBits", c)
		}
		want |= 1 << bit
	}
	pid := inspect(ctx, t, ctr, "{{.State.Pid}}")
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
		got, err := strconv.ParseUint(statusField(t, pid, f), 16, 64)
		if err != nil || got != want {
			t.Errorf("%s %s = %x, want %x (%v)", ctr, f, got, want, sc.Capabilities.Add)
		}
	}
	if got := statusField(t, pid, "NoNewPrivs"); got != "1" {
		t.Errorf("%s NoNewPrivs = %s, want 1 (allowPrivilegeEscalation: false)", ctr, got)
	}
	if got := statusField(t, pid, "Seccomp"); got != "2" {
		t.Errorf("%s Seccomp = %s, want 2: a filter (RuntimeDefault)", ctr, got)
	}
	if got := inspect(ctx, t, ctr, "{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.Privileged}}"); got != "true false" {
		t.Errorf("%s read-only root, privileged = %s, want true false", ctr, got)
	}
	if out, err := exec.CommandContext(ctx, "podman", "exec", ctr, "touch", "/probe").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "Read-only file system") {
		t.Errorf("%s: writing / did not fail as read-only: %v %s", ctr, err, out)
	}
}

// probe runs an httpGet probe as the kubelet does for a hostNetwork pod:
// against the node's address, here from the client namespace.
func probe(ctx context.Context, c *lab.Cluster, n *lab.Node, p *corev1.Probe) (int, string, error) {
	url := fmt.Sprintf("http://%s:%d%s", n.Addr4, p.HTTPGet.Port.IntValue(), p.HTTPGet.Path)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.TimeoutSeconds)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestManifestsRunWithPodman(t *testing.T) {
	image := os.Getenv(imageEnv)
	if image == "" {
		t.Skipf("%s is not set: make image-test runs this test with the image it built", imageEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, podman)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// podman as it runs on this machine: runc, and explicit ulimits.
	dir := t.TempDir()
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n[engine]\nruntime = \"runc\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONTAINERS_CONF", conf)

	c, err := lab.New(ctx, lab.Options{Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	})
	p := &player{t: t, c: c, dir: dir}
	t.Cleanup(p.cleanup)

	// --- the workload: overlays/kubernetes, one pod per node -------------
	objs := build(t, "overlays/kubernetes", image, len(c.Nodes))
	if len(objs["Deployment"]) != 1 {
		t.Fatalf("want one Deployment, got %d", len(objs["Deployment"]))
	}
	var dep appsv1.Deployment
	decode(t, objs["Deployment"][0], &dep)
	built := dep.Spec.Template.Spec
	sc := built.Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || (sc.Privileged != nil && *sc.Privileged) {
		t.Fatalf("the built pod is not least-privilege: %+v", sc)
	}
	configMaps := objs["ConfigMap"]
	ctrs := map[*lab.Node]string{}
	for _, n := range c.Nodes {
		d := dep.DeepCopy()
		d.Name += "-" + n.Name
		d.Spec.Replicas = new(int32(1))
		forNode(&d.Spec.Template.Spec, n.Name)
		doc, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		pod := d.Name + "-pod-0"
		p.pods = append(p.pods, pod)
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.EmptyDir != nil {
				p.volumes = append(p.volumes, v.Name)
			}
		}
		p.play(ctx, n, d.Name, append(slices.Clone(configMaps), doc)...)
		ctrs[n] = pod + "-" + built.Containers[0].Name
	}
	p.volumes = append(p.volumes, "keepalived-checkscript")

	t.Run("security context", func(t *testing.T) {
		for _, n := range c.Nodes {
			checkSecurity(ctx, t, ctrs[n], sc)
		}
	})

	ready := built.Containers[0].ReadinessProbe
	live := built.Containers[0].LivenessProbe
	if ready == nil || ready.HTTPGet == nil || live == nil || live.HTTPGet == nil {
		t.Fatalf("the built pod has no httpGet probes: readiness %+v liveness %+v", ready, live)
	}
	t.Run("ready through the probe", func(t *testing.T) {
		for _, n := range c.Nodes {
			wait.For(t, n.Name+" ready by "+ready.HTTPGet.Path, func() bool {
				code, _, err := probe(ctx, c, n, ready)
				return err == nil && code == http.StatusOK
			})
			if code, body, err := probe(ctx, c, n, live); err != nil || code != http.StatusOK {
				t.Errorf("%s liveness %s: %d %q %v", n.Name, live.HTTPGet.Path, code, body, err)
			}
		}
	})

	holders, err := c.WaitStable(ctx, vips, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("holders: %s", holders)

	t.Run("no permission errors", func(t *testing.T) {
		for _, n := range c.Nodes {
			out, err := exec.CommandContext(ctx, "podman", "logs", ctrs[n]).CombinedOutput()
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range []string{"Operation not permitted", "Permission denied", "Read-only file system", "cant open raw socket", "Couldn't setgroups"} {
				if bytes.Contains(out, []byte(bad)) {
					t.Errorf("%s logs %q:\n%s", n.Name, bad, out)
				}
			}
		}
	})

	// --- a node's pod stops: its VIPs move ------------------------------
	leaving := holders[vips[0]]
	var moved []netip.Addr
	for _, v := range vips {
		if holders[v] == leaving {
			moved = append(moved, v)
		}
	}
	if out, err := exec.CommandContext(ctx, "podman", "pod", "stop", "-t", strconv.Itoa(int(*built.TerminationGracePeriodSeconds)), podOf(ctrs[leaving])).CombinedOutput(); err != nil {
		t.Fatalf("podman pod stop: %v: %s", err, out)
	}
	if code := inspect(ctx, t, ctrs[leaving], "{{.State.ExitCode}}"); code != "0" {
		t.Errorf("%s: the stopped pod's container exited %s, want 0", leaving.Name, code)
	}
	after, err := c.WaitOneHolder(ctx, vips, func(m lab.HolderMap) bool {
		for _, v := range moved {
			if m[v] == leaving {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("after stopping %s's pod: %v", leaving.Name, err)
	}
	t.Logf("%s's pod stopped; holders: %s", leaving.Name, after)

	// --- a node's pod is killed: keepalived cannot release its VIPs -----
	killed := after[vips[0]]
	if out, err := exec.CommandContext(ctx, "podman", "kill", "-s", "KILL", ctrs[killed]).CombinedOutput(); err != nil {
		t.Fatalf("podman kill: %v: %s", err, out)
	}
	// The remaining pods stop as a Deployment's deletion stops them.
	for _, n := range c.Nodes {
		if n == leaving || n == killed {
			continue
		}
		if out, err := exec.CommandContext(ctx, "podman", "pod", "stop", "-t", "30", podOf(ctrs[n])).CombinedOutput(); err != nil {
			t.Fatalf("podman pod stop: %v: %s", err, out)
		}
	}
	leftovers(ctx, t, c, true)

	// --- the cleanup Job's pod on every node ------------------------------
	cobjs := build(t, "cleanup/kubernetes", image, len(c.Nodes))
	var job batchv1.Job
	decode(t, cobjs["Job"][0], &job)
	if job.Spec.Completions == nil || int(*job.Spec.Completions) != len(c.Nodes) {
		t.Fatalf("cleanup Job completions %v, want one per node (%d)", job.Spec.Completions, len(c.Nodes))
	}
	jsc := job.Spec.Template.Spec.Containers[0].SecurityContext
	for round := 1; round <= 2; round++ {
		for _, n := range c.Nodes {
			pod := corev1.Pod{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", job.Name, n.Name, round), Labels: job.Spec.Template.Labels},
				Spec:       *job.Spec.Template.Spec.DeepCopy(),
			}
			forNode(&pod.Spec, fmt.Sprintf("%s-%d", n.Name, round))
			doc, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			p.pods = append(p.pods, pod.Name)
			for _, v := range pod.Spec.Volumes {
				p.volumes = append(p.volumes, v.Name)
			}
			p.play(ctx, n, pod.Name, append(slices.Clone(configMaps), doc)...)
			ctr := pod.Name + "-" + pod.Spec.Containers[0].Name
			if out, err := exec.CommandContext(ctx, "podman", "wait", ctr).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "0" {
				logs, _ := exec.CommandContext(ctx, "podman", "logs", ctr).CombinedOutput()
				t.Errorf("cleanup round %d on %s: exit %s %v\n%s", round, n.Name, bytes.TrimSpace(out), err, logs)
			}
			checkExited(ctx, t, ctr, jsc)
		}
		leftovers(ctx, t, c, false)
	}
}

// podOf returns the podman pod of a container named POD-CONTAINER.
func podOf(ctr string) string {
	i := strings.Index(ctr, "-pod-0-")
	return ctr[:i+len("-pod-0")]
}

// checkExited checks the security context of a container that has exited,
// as podman recorded it.
func checkExited(ctx context.Context, t *testing.T, ctr string, sc *corev1.SecurityContext) {
	t.Helper()
	var want []string
	for _, c := range sc.Capabilities.Add {
		want = append(want, "CAP_"+string(c))
	}
	if got := inspect(ctx, t, ctr, "{{range .EffectiveCaps}}{{.}} {{end}}"); got != strings.Join(want, " ") {
		t.Errorf("%s effective capabilities %q, want %q", ctr, got, want)
	}
	if got := inspect(ctx, t, ctr, "{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.Privileged}} {{.HostConfig.SecurityOpt}}"); got != "true false [no-new-privileges]" {
		t.Errorf("%s read-only root, privileged, security options = %s, want true false [no-new-privileges]", ctr, got)
	}
}

// leftovers checks the nodes for what the pods add: VIPs, the VRRP rule in
// INPUT, the nftables table. With want, the killed pod's VIPs and every
// node's rule must still be there (so the cleanup has work to do);
// without, nothing may be left.
func leftovers(ctx context.Context, t *testing.T, c *lab.Cluster, want bool) {
	t.Helper()
	var found []string
	for _, n := range c.Nodes {
		for _, v := range vips {
			if has, err := n.Has(v); err != nil {
				t.Fatal(err)
			} else if has {
				found = append(found, n.Name+" VIP "+v.String())
			}
		}
		out, err := n.Exec(ctx, "iptables", "-w", "-S", "INPUT")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte("224.0.0.18")) {
			found = append(found, n.Name+" iptables rule")
		}
		if out, err := n.Exec(ctx, "nft", "list", "tables"); err != nil {
			t.Fatal(err)
		} else if bytes.Contains(out, []byte("keepalived")) {
			found = append(found, n.Name+" nft table")
		}
	}
	if want {
		if !slices.ContainsFunc(found, func(f string) bool { return strings.Contains(f, " VIP ") }) || len(found) <= len(c.Nodes) {
			t.Fatalf("before the cleanup: want a killed pod's VIPs and every node's rule, found %v", found)
		}
		t.Logf("before the cleanup: %v", found)
		return
	}
	if len(found) > 0 {
		t.Errorf("after the cleanup: %v", found)
	}
}

// testWriter sends the lab's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
