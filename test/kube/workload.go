package kube

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/lab"
)

// Namespace is where deploy/'s manifests put everything.
const Namespace = "ipfailover"

// Overlay is a user's kustomization over one of deploy/'s, the one
// docs/installation.md tells a plain-Kubernetes user to write: the image, the
// settings, the replica count; plus imagePullPolicy: Never, since the
// nodes import their images and pull nothing.
type Overlay struct {
	// Base is the kustomization under deploy/: "overlays/kubernetes",
	// "cleanup/kubernetes"...
	Base string
	// Image is the image reference (repository:tag).
	Image string
	// Config sets keys of the ipfailover-config ConfigMap (bases that
	// have it).
	Config map[string]string
	// Replicas sets the Deployment's replicas; 0 leaves them.
	Replicas int
	// Components are deploy/'s components to add ("components/multicast").
	Components []string
	// Namespace moves everything there ("": deploy/'s, Namespace).
	Namespace string
	// NodeSelector replaces the workload's node selector (nil leaves it).
	NodeSelector map[string]string
}

// Kustomization is the overlay's kustomization.yaml for a directory dir
// (the base is named relative to it).
func (o Overlay) Kustomization(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	base, err := filepath.Rel(dir, filepath.Join(root, "deploy", o.Base))
	if err != nil {
		return "", err
	}
	name, tag := o.Image, "latest"
	if i := strings.LastIndex(o.Image, ":"); i > strings.LastIndex(o.Image, "/") {
		name, tag = o.Image[:i], o.Image[i+1:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if o.Namespace != "" {
		fmt.Fprintf(&b, "namespace: %s\n", o.Namespace)
	}
	if len(o.Components) > 0 {
		b.WriteString("components:\n")
		for _, comp := range o.Components {
			rel, err := filepath.Rel(dir, filepath.Join(root, "deploy", comp))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "  - %s\n", rel)
		}
	}
	fmt.Fprintf(&b, `resources:
  - %s
images:
  - name: ipfailover
    newName: %s
    newTag: %s
patches:
`, base, name, tag)
	if len(o.Config) > 0 {
		b.WriteString("  - target: {kind: ConfigMap, name: ipfailover-config}\n    patch: |-\n")
		for _, k := range slices.Sorted(maps.Keys(o.Config)) {
			// add replaces a key that is there and adds one that is not.
			fmt.Fprintf(&b, "      - {op: add, path: /data/%s, value: %q}\n", k, o.Config[k])
		}
	}
	if o.Replicas > 0 {
		fmt.Fprintf(&b, "  - target: {kind: Deployment, name: ipfailover}\n    patch: |-\n      - {op: replace, path: /spec/replicas, value: %d}\n", o.Replicas)
	}
	if o.NodeSelector != nil {
		sel := make([]string, 0, len(o.NodeSelector))
		for _, k := range slices.Sorted(maps.Keys(o.NodeSelector)) {
			sel = append(sel, fmt.Sprintf("%q: %q", k, o.NodeSelector[k]))
		}
		fmt.Fprintf(&b, "  - target: {kind: Deployment}\n    patch: |-\n      - {op: replace, path: /spec/template/spec/nodeSelector, value: {%s}}\n", strings.Join(sel, ", "))
	}
	for _, kind := range []string{"Deployment", "DaemonSet", "Job"} {
		fmt.Fprintf(&b, "  - target: {kind: %s}\n    patch: |-\n      - {op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never}\n", kind)
	}
	b.WriteString("  - target: {kind: DaemonSet, name: remove-ipfailover}\n    patch: |-\n      - {op: add, path: /spec/template/spec/initContainers/0/imagePullPolicy, value: Never}\n")
	return b.String(), nil
}

// overlayDir writes the overlay to a directory of its own under the
// cluster's and returns it.
func (c *Cluster) overlayDir(o Overlay) (string, error) {
	dir := filepath.Join(c.st.Dir, "overlays", strings.ReplaceAll(o.Base, "/", "-"))
	if o.Namespace != "" {
		dir += "-" + o.Namespace
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	k, err := o.Kustomization(dir)
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

// Apply runs kubectl apply -k on the overlay, as a user does.
func (c *Cluster) Apply(ctx context.Context, o Overlay) error {
	dir, err := c.overlayDir(o)
	if err != nil {
		return err
	}
	_, err = c.Kubectl(ctx, "apply", "-k", dir)
	return err
}

// Delete runs kubectl delete -k on the overlay and waits until what it
// named is gone.
func (c *Cluster) Delete(ctx context.Context, o Overlay) error {
	dir, err := c.overlayDir(o)
	if err != nil {
		return err
	}
	_, err = c.Kubectl(ctx, "delete", "-k", dir, "--ignore-not-found", "--wait=true", "--timeout=3m")
	return err
}

// RolloutStatus waits until the workload ("deployment/ipfailover",
// "daemonset/ipfailover") has rolled out.
func (c *Cluster) RolloutStatus(ctx context.Context, workload string) error {
	_, err := c.Kubectl(ctx, "-n", Namespace, "rollout", "status", workload, "--timeout=5m")
	return err
}

// RolloutRestart restarts the workload's pods as kubectl rollout restart
// does and waits until the rollout is done.
func (c *Cluster) RolloutRestart(ctx context.Context, workload string) error {
	if _, err := c.Kubectl(ctx, "-n", Namespace, "rollout", "restart", workload); err != nil {
		return err
	}
	return c.RolloutStatus(ctx, workload)
}

// Drain drains a node as an admin does before maintenance: cordoned, its
// pods evicted (DaemonSet pods stay; emptyDir data goes).
func (c *Cluster) Drain(ctx context.Context, node string) error {
	_, err := c.Kubectl(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
	return err
}

// Uncordon lets the scheduler use a node again.
func (c *Cluster) Uncordon(ctx context.Context, node string) error {
	_, err := c.Kubectl(ctx, "uncordon", node)
	return err
}

// Pods lists the pods in the namespace that match the label selector.
func (c *Cluster) Pods(ctx context.Context, selector string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.KubectlJSON(ctx, &list, "-n", Namespace, "get", "pods", "-l", selector); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// DeletePod deletes a pod as kubectl delete pod does (graceful) and waits
// until it is gone.
func (c *Cluster) DeletePod(ctx context.Context, name string) error {
	_, err := c.Kubectl(ctx, "-n", Namespace, "delete", "pod", name, "--wait=true", "--timeout=3m")
	return err
}

// Ready reports whether a pod is Ready.
func Ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WarningEvents lists the Warning events of every namespace that
// happened at or after since.
func (c *Cluster) WarningEvents(ctx context.Context, since time.Time) ([]corev1.Event, error) {
	return c.Events(ctx, "type=Warning", since)
}

// Events lists the events of every namespace that match fieldSelector
// (for example "reason=TaintManagerEviction") and happened at or after
// since.
func (c *Cluster) Events(ctx context.Context, fieldSelector string, since time.Time) ([]corev1.Event, error) {
	var list corev1.EventList
	if err := c.KubectlJSON(ctx, &list, "get", "events", "-A", "--field-selector", fieldSelector); err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range list.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if !last.Before(since.Truncate(time.Second)) {
			out = append(out, e)
		}
	}
	return out, nil
}

// ProbeDeadline is how soon a probe's connection must be accepted to count
// (the handshake's round trip, by the kernel's clock: lab.ProbeTCP).
const ProbeDeadline = 50 * time.Millisecond

// Gap is a target's longest run without an answer during ProbeDuring.
type Gap struct {
	// Longest leaves out the time in which no node answered at its own
	// address either (lab.MachineGaps); Raw is the same gap whole.
	Longest, Raw time.Duration
}

func (g Gap) String() string {
	if g.Raw == g.Longest {
		return g.Longest.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%s (%s, less %s in which no node answered at its own address either)",
		g.Longest.Round(time.Millisecond), g.Raw.Round(time.Millisecond), (g.Raw - g.Longest).Round(time.Millisecond))
}

// machineGapAfter is how long every node's own address must go unanswered
// for the machine to count as not running: five probe intervals, as make
// chaos counts a stalled client.
const machineGapAfter = 5

// ProbeDuring runs action while the lab's client probes every target every
// interval (TCP connects, lab.ProbeTCP), then waits for settled to hold
// (each VIP's holder back in place) and every target to answer again, and
// returns each target's longest outage from the action's start. The client
// probes every node's own address on the first target's port as well, the
// control: a span in which two or more nodes that answered there at all
// went unanswered together is the machine's, and the gaps leave it out.
func (c *Cluster) ProbeDuring(ctx context.Context, targets []netip.AddrPort, interval time.Duration, action, settled func() error) ([]Gap, error) {
	p, err := c.lab.ProbeTCP(targets, interval, ProbeDeadline)
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	var own []netip.AddrPort
	for _, n := range c.lab.Nodes {
		own = append(own, netip.AddrPortFrom(n.Addr4, targets[0].Port()))
	}
	controls, err := c.lab.ProbeTCP(own, interval, ProbeDeadline)
	if err != nil {
		return nil, err
	}
	defer controls.Stop()
	if err := p.WaitSteady(ctx, 10*interval, time.Minute); err != nil {
		return nil, fmt.Errorf("before the action: %w", err)
	}
	began := time.Now()
	if err := action(); err != nil {
		return nil, err
	}
	if settled != nil {
		if err := settled(); err != nil {
			return nil, err
		}
	}
	steady := p.WaitSteady(ctx, 10*interval, time.Minute)
	p.Stop()
	controls.Stop()
	machine := lab.MachineGaps(controls, machineGapAfter*interval)
	gaps := make([]Gap, len(targets))
	for i := range targets {
		gaps[i] = Gap{Longest: p.OutageExcept(i, began, machine), Raw: p.Outage(i, began)}
	}
	c.log.Info("probed", "longest_gaps", gaps, "rounds_at_most_apart", p.Spacing(), "machine_gaps", len(machine))
	if steady != nil {
		return gaps, fmt.Errorf("after the action: %w", steady)
	}
	return gaps, nil
}

// Holders is the lab's WaitStable: one holder per VIP, unchanged for
// quiet.
func (c *Cluster) Holders(ctx context.Context, vips []netip.Addr, quiet time.Duration) (lab.HolderMap, error) {
	return c.lab.WaitStable(ctx, vips, quiet)
}

// Machine returns the machine of a lab node, or nil.
func (c *Cluster) Machine(n *lab.Node) *Machine {
	for _, m := range c.machines() {
		if m.lab == n {
			return m
		}
	}
	return nil
}
