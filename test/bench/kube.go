package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The kube rows: deploy/'s manifests on a real Kubernetes cluster
// (test/kube), as a user applies them, with a client connecting to every
// VIP every 10 ms while an admin rolls the pods out, deletes one, drains
// a node, and while a node dies; plus what the cluster itself costs.
const (
	rowKubeUp        = "kube: cluster bring-up (make kube-up, once built)"
	rowKubeImport    = "kube: image import, per node"
	rowKubeCP        = "kube: control-plane RSS (etcd, API server, controllers, scheduler)"
	rowKubeNode      = "kube: node RSS (containerd, kubelet, kube-proxy, the ipfailover pod)"
	rowKubeRollout   = "kube: rollout restart, Deployment: longest gap per VIP"
	rowKubeRolloutDS = "kube: rollout restart, DaemonSet: longest gap per VIP"
	rowKubeDelete    = "kube: kubectl delete pod of a holder: longest gap per VIP"
	rowKubeDrain     = "kube: kubectl drain of a holder's node: longest gap per VIP"
	rowKubeDeath     = "kube: node death: VIP move"
	// kubeVIPs are on the lab's own network: the client reaches them by
	// ARP, as a client on the nodes' network does.
	kubeVIPs = "192.0.2.100-102"
	// kubeProbe is how often the client connects to each VIP.
	kubeProbe = 10 * time.Millisecond
	// kubeDeaths bounds the node-death rounds (each about 40 s).
	kubeDeaths = 3
	// kubeQuiet is how long the holders must stay put to count as
	// settled: a restarted node takes its preferred VIPs back about three
	// advert intervals after its keepalived started, a second or two
	// after its pod is Ready.
	kubeQuiet = 4 * time.Second
)

// kube brings a cluster up, measures the kube rows and removes it.
func (r *runner) kube(ctx context.Context) error {
	if r.o.KubeBin == "" || r.o.Image == "" {
		return fmt.Errorf("the kube rows need the Kubernetes binaries and the image (make kube-bins, make image)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "ipfailover-bench-kube-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	began := time.Now()
	c, err := kube.Up(ctx, kube.Options{Dir: dir, Bin: r.o.KubeBin, Images: []string{r.o.Image}, Logger: r.o.Log})
	if err != nil {
		return err
	}
	r.add(rowKubeUp, Sample{Value: time.Since(began)})
	for _, d := range c.ImportTimes() {
		r.add(rowKubeImport, Sample{Value: d})
	}
	defer func() {
		if err := kube.Down(context.WithoutCancel(ctx), dir, r.o.Log); err != nil {
			r.note("removing the kube cluster: %v", err)
		}
	}()
	defer c.Close()
	var services []*lab.Service
	defer func() {
		for _, s := range services {
			s.Stop()
		}
	}()
	for _, n := range c.Nodes {
		s, err := lab.ListenIn(n.Netns, fmt.Sprintf("0.0.0.0:%d", MonitorPort))
		if err != nil {
			return err
		}
		services = append(services, s)
	}
	k := &kubeRun{r: r, c: c, vips: VIPs(kubeVIPs)}
	return k.measure(ctx)
}

type kubeRun struct {
	r    *runner
	c    *kube.Cluster
	vips []netip.Addr
}

func (k *kubeRun) overlay(base string) kube.Overlay {
	return kube.Overlay{Base: base, Image: k.r.o.Image, Replicas: 3, Config: map[string]string{
		"OPENSHIFT_HA_VIRTUAL_IPS":   kubeVIPs,
		"OPENSHIFT_HA_REPLICA_COUNT": "3",
		"OPENSHIFT_HA_MONITOR_PORT":  fmt.Sprint(MonitorPort),
	}}
}

func (k *kubeRun) measure(ctx context.Context) error {
	c := k.c
	dep := k.overlay("overlays/kubernetes")
	if err := c.Apply(ctx, dep); err != nil {
		return err
	}
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		return err
	}
	if _, err := c.Holders(ctx, k.vips, kubeQuiet); err != nil {
		return err
	}
	rss, err := c.ControlPlane.RSS()
	if err != nil {
		return err
	}
	k.r.addSize(rowKubeCP, rss)
	if err := k.entrypointRSS(rowKubeRSSPods); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		rss, err := n.RSS()
		if err != nil {
			return err
		}
		k.r.addSize(rowKubeNode, rss)
	}
	for round := range k.r.o.Rounds {
		k.r.o.Log.Info("kube round", "round", round+1, "of", k.r.o.Rounds)
		if err := k.gaps(ctx, rowKubeRollout, func() error { return c.RolloutRestart(ctx, deployment) }); err != nil {
			return err
		}
		holder, pod, err := k.holderPod(ctx)
		if err != nil {
			return err
		}
		if err := k.gaps(ctx, rowKubeDelete, func() error {
			if err := c.DeletePod(ctx, pod.Name); err != nil {
				return err
			}
			return c.RolloutStatus(ctx, deployment)
		}); err != nil {
			return err
		}
		if holder, _, err = k.holderPod(ctx); err != nil {
			return err
		}
		// Drained, then back in service: the replacement that waited
		// Pending runs there again and takes its VIPs back, all of it
		// under the probes.
		if err := k.gaps(ctx, rowKubeDrain, func() error {
			if err := c.Drain(ctx, holder.Name); err != nil {
				return err
			}
			if err := c.Uncordon(ctx, holder.Name); err != nil {
				return err
			}
			return c.RolloutStatus(ctx, deployment)
		}); err != nil {
			return err
		}
		if err := k.membership(ctx); err != nil {
			return err
		}
	}
	for round := range min(k.r.o.Rounds, kubeDeaths) {
		k.r.o.Log.Info("kube node death", "round", round+1)
		if err := k.death(ctx); err != nil {
			return err
		}
	}
	if err := c.Delete(ctx, dep); err != nil {
		return err
	}
	if err := k.migrate(ctx); err != nil {
		return err
	}
	if err := c.Delete(ctx, dep); err != nil {
		return err
	}
	ds := k.overlay("overlays/daemonset")
	if err := c.Apply(ctx, ds); err != nil {
		return err
	}
	if err := c.RolloutStatus(ctx, "daemonset/ipfailover"); err != nil {
		return err
	}
	if _, err := c.Holders(ctx, k.vips, kubeQuiet); err != nil {
		return err
	}
	for range k.r.o.Rounds {
		if err := k.gaps(ctx, rowKubeRolloutDS, func() error { return c.RolloutRestart(ctx, "daemonset/ipfailover") }); err != nil {
			return err
		}
	}
	return c.Delete(ctx, ds)
}

// gaps runs action while the client probes every VIP and adds each VIP's
// longest gap to row, the holders settled again.
func (k *kubeRun) gaps(ctx context.Context, row string, action func() error) error {
	gaps, err := k.c.ProbeDuring(ctx, k.targets(), kubeProbe, action, func() error {
		_, err := k.c.Holders(ctx, k.vips, kubeQuiet)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", row, err)
	}
	// The rows keep the whole gap, the machine's share in it included
	// (the log says how much that was).
	for i, g := range gaps {
		k.r.add(row, Sample{Value: g.Raw})
		k.r.o.Log.Info(row, "vip", k.vips[i], "longest_gap", g)
	}
	return nil
}

func (k *kubeRun) targets() []netip.AddrPort {
	var out []netip.AddrPort
	for _, v := range k.vips {
		out = append(out, netip.AddrPortFrom(v, MonitorPort))
	}
	return out
}

// holderPod returns the node holding the first VIP and its pod.
func (k *kubeRun) holderPod(ctx context.Context) (*kube.Machine, corev1.Pod, error) {
	h, err := k.c.Holders(ctx, k.vips, kubeQuiet)
	if err != nil {
		return nil, corev1.Pod{}, err
	}
	m := k.c.Machine(h[k.vips[0]])
	pods, err := k.c.Pods(ctx, podSelector)
	if err != nil {
		return nil, corev1.Pod{}, err
	}
	for _, p := range pods {
		if p.Spec.NodeName == m.Name && p.DeletionTimestamp == nil {
			return m, p, nil
		}
	}
	return nil, corev1.Pod{}, fmt.Errorf("no pod on %s", m.Name)
}

// death kills the node holding the first VIP at a random moment of the
// advert interval, times each of its VIPs until another node has it (by
// netlink, as the lab's crash rows), against the best backup's master-down
// interval, and boots the node again.
func (k *kubeRun) death(ctx context.Context) error {
	c := k.c
	holder, _, err := k.holderPod(ctx)
	if err != nil {
		return err
	}
	confs, err := k.confs(ctx)
	if err != nil {
		return err
	}
	w, err := NewWatcher(c.Lab().Nodes)
	if err != nil {
		return err
	}
	defer w.Close()
	snap, err := w.Snapshot()
	if err != nil {
		return err
	}
	var moving []netip.Addr
	limits := map[netip.Addr]time.Duration{}
	for _, v := range k.vips {
		if snap.Holder(v) != holder.Lab() {
			continue
		}
		_, prio, conf, err := BestBackup(confs, holder.Name, v)
		if err != nil {
			return err
		}
		moving = append(moving, v)
		limits[v] = conf.MasterDown(prio)
	}
	if err := randomPhase(ctx, time.Second); err != nil {
		return err
	}
	t0 := time.Now()
	if err := holder.Die(ctx); err != nil {
		return err
	}
	seen := map[netip.Addr]time.Duration{}
	wctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	if _, _, err := w.Wait(wctx, k.r.o.Poll, func(s Snapshot) bool {
		for _, v := range moving {
			if _, ok := seen[v]; !ok && s.Holder(v, holder.Lab()) != nil {
				seen[v] = s.At.Sub(t0)
			}
		}
		return len(seen) == len(moving)
	}); err != nil {
		return fmt.Errorf("%s: waiting for %v to leave %s: %w", rowKubeDeath, moving, holder.Name, err)
	}
	for _, v := range moving {
		k.r.add(rowKubeDeath, Sample{Value: seen[v], Limit: limits[v]})
		k.r.o.Log.Info(rowKubeDeath, "vip", v, "from", holder.Name, "took", seen[v].Round(time.Millisecond), "limit", limits[v])
	}
	if err := holder.Boot(ctx); err != nil {
		return err
	}
	if err := c.WaitNodesReady(ctx); err != nil {
		return err
	}
	// The node's pod runs again (restarted by its kubelet, or replaced
	// if the node was away long enough to be marked unreachable), and
	// takes its preferred VIPs back.
	wctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		pods, err := c.Pods(wctx, podSelector)
		if err != nil {
			return err
		}
		back := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && kube.Ready(p) && (p.Spec.NodeName != holder.Name || startedAfter(p, t0)) {
				back++
			}
		}
		if back == len(c.Nodes) {
			break
		}
		if err := sleep(wctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("%s: waiting for %s's pod to run again: %w", rowKubeDeath, holder.Name, err)
		}
	}
	_, err = c.Holders(ctx, k.vips, kubeQuiet)
	return err
}

// startedAfter reports whether the pod's container (re)started after t.
func startedAfter(p corev1.Pod, t time.Time) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil && s.State.Running.StartedAt.After(t) {
			return true
		}
	}
	return false
}

// confs reads every pod's keepalived.conf, by node.
func (k *kubeRun) confs(ctx context.Context) (map[string]*keepalived.Conf, error) {
	pods, err := k.c.Pods(ctx, podSelector)
	if err != nil {
		return nil, err
	}
	out := map[string]*keepalived.Conf{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		b, err := k.c.Kubectl(ctx, "-n", kube.Namespace, "exec", p.Name, "--", "cat", configPath)
		if err != nil {
			return nil, err
		}
		conf, err := keepalived.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		out[p.Spec.NodeName] = conf
	}
	return out, nil
}
