package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The cluster's workload, as docs/installation.md tells a user to install it.
const (
	deployment = "deployment/ipfailover"
	podLabel   = "ipfailover=ipfailover"
)

// kubeConfig is the cluster's ipfailover-config: the lab's settings.
func kubeConfig(advert, checkInterval string) map[string]string {
	cfg := map[string]string{}
	for _, kv := range labEnv(advert) {
		k, v, _ := strings.Cut(kv, "=")
		cfg[k] = v
	}
	if checkInterval != "" {
		cfg["OPENSHIFT_HA_CHECK_INTERVAL"] = checkInterval
	}
	return cfg
}

// kubeTarget is the real cluster of test/kube: three nodes running
// deploy/overlays/kubernetes, each serving the checked port, the client in
// the lab's client namespace.
type kubeTarget struct {
	o   Options
	c   *kube.Cluster
	log *slog.Logger
	// config is the ConfigMap's data now (a config rollout changes it).
	config map[string]string

	// api is held shared by the faults that go through the API server
	// (an admin's kubectl), and alone by its stop: a drain does not begin
	// while the API server is down, nor does the API server stop amid one.
	api sync.RWMutex

	mu    sync.Mutex
	locks map[string]*sync.Mutex
	confs map[string]*keepalived.Conf

	// stopLogs ends the copy of the pods' logs (kube.KeepPodLogs) and waits for
	// its last round; nil without o.Out.
	stopLogs func()
}

// podLogsEvery is how often the pods' logs are copied: a pod's last lines
// before its deletion are lost within it.
const podLogsEvery = 200 * time.Millisecond

// keepPodLogs copies the workload's pods' logs into o.Out/logs until
// stopLogs (the report directory's earlier logs removed first).
func (t *kubeTarget) keepPodLogs() error {
	if t.o.Out == "" {
		return nil
	}
	dir := filepath.Join(t.o.Out, "logs")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	t.stopLogs = t.c.KeepPodLogs(dir, kube.Namespace, podLogsEvery)
	return nil
}

func newKubeTarget(ctx context.Context, o Options) (*kubeTarget, error) {
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(o.logWriter(), &slog.HandlerOptions{Level: level}))
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "kube: bringing a cluster up in %s (Kubernetes from %s, image %s)\n", o.KubeDir, o.KubeBin, o.Image)
	}
	began := time.Now()
	c, err := kube.Up(ctx, kube.Options{Dir: o.KubeDir, Bin: o.KubeBin, Images: append([]string{o.Image}, o.MoreImages...), Logger: log})
	if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "kube: cluster up in %s, nodes in network namespaces %s%s-*\n", time.Since(began).Round(100*time.Millisecond), lab.NetnsPrefix, c.State().Name)
	}
	t := &kubeTarget{o: o, c: c, log: log, config: kubeConfig(o.AdvertInterval, ""), locks: map[string]*sync.Mutex{}}
	for _, m := range c.Nodes {
		t.locks[m.Name] = &sync.Mutex{}
	}
	if err := t.keepPodLogs(); err != nil {
		return nil, errors.Join(fmt.Errorf("keeping the pods' logs: %w", err), t.close())
	}
	return t, nil
}

func (t *kubeTarget) name() string { return "the real cluster" }

func (t *kubeTarget) nodeNames() []string {
	var names []string
	for _, m := range t.c.Nodes {
		names = append(names, m.Name)
	}
	return names
}

func (t *kubeTarget) vips() []netip.Addr { return labVIPs }

func (t *kubeTarget) settings() []string {
	var s []string
	for k, v := range t.config {
		s = append(s, k+"="+v)
	}
	slices.Sort(s)
	return append(s, "(deploy/overlays/kubernetes, 3 replicas)")
}

func (t *kubeTarget) observed() []Observed {
	var obs []Observed
	for _, m := range t.c.Nodes {
		obs = append(obs, Observed{Name: m.Name, Netns: m.Lab().Netns, Link: lab.Link, Addr4: m.Lab().Addr4, Addr6: m.Lab().Addr6})
	}
	return obs
}

func (t *kubeTarget) clientNetns() string { return t.c.Lab().Client.Netns }

func (t *kubeTarget) dialer() (Dialer, func(), error) {
	d, err := t.c.Lab().ClientDialer()
	if err != nil {
		return nil, nil, err
	}
	return d.DialContext, d.Close, nil
}

func (t *kubeTarget) overlay() kube.Overlay {
	return kube.Overlay{Base: "overlays/kubernetes", Image: t.o.Image, Config: t.config, Replicas: len(t.c.Nodes)}
}

// start serves the checked port on every node, applies the overlay, waits
// for the rollout and for the holders to settle, and reads each node's
// keepalived.conf from its pod.
func (t *kubeTarget) start(ctx context.Context) error {
	for _, m := range t.c.Nodes {
		if err := t.startService(ctx, m); err != nil {
			return err
		}
	}
	if err := t.c.Apply(ctx, t.overlay()); err != nil {
		return err
	}
	if err := t.c.RolloutStatus(ctx, deployment); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := t.c.Lab().WaitStable(wctx, labVIPs, 3*advertOf(t.o.AdvertInterval)+time.Second); err != nil {
		return fmt.Errorf("the fleet did not settle: %w", err)
	}
	return t.readConfigs(ctx)
}

func (t *kubeTarget) readConfigs(ctx context.Context) error {
	pods, err := t.readyPods(ctx)
	if err != nil {
		return err
	}
	confs := map[string]*keepalived.Conf{}
	for _, p := range pods {
		out, err := t.c.Kubectl(ctx, "-n", kube.Namespace, "exec", p.Name, "--", "cat", configPath)
		if err != nil {
			return fmt.Errorf("reading %s's keepalived.conf: %w", p.Spec.NodeName, err)
		}
		conf, err := keepalived.Parse(out)
		if err != nil {
			return fmt.Errorf("%s: %w", p.Spec.NodeName, err)
		}
		confs[p.Spec.NodeName] = conf
	}
	t.mu.Lock()
	t.confs = confs
	t.mu.Unlock()
	return nil
}

func (t *kubeTarget) configs() map[string]*keepalived.Conf {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confs
}

// readyPods waits until every node runs a Ready pod, and returns them.
func (t *kubeTarget) readyPods(ctx context.Context) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := pollFor(ctx, "a Ready ipfailover pod on every node", func(ctx context.Context) error {
		var err error
		if pods, err = t.c.Pods(ctx, podLabel); err != nil {
			return err
		}
		nodes := map[string]bool{}
		var desc []string
		for _, p := range pods {
			if p.DeletionTimestamp == nil && kube.Ready(p) {
				nodes[p.Spec.NodeName] = true
			}
			desc = append(desc, fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, kube.Ready(p)))
		}
		if len(nodes) != len(t.c.Nodes) || len(pods) != len(t.c.Nodes) {
			return errors.New(strings.Join(desc, "; "))
		}
		return nil
	})
	return pods, err
}

// waitReadyz waits until m's ipfailover answers /readyz with 200 and its
// check passes (see checkPasses).
func (t *kubeTarget) waitReadyz(ctx context.Context, m *kube.Machine) error {
	return pollFor(ctx, m.Name+"'s /readyz and check", func(ctx context.Context) error {
		return readyAndChecked(ctx, t.c.Lab(), m.Lab().Addr4)
	})
}

// podOn returns the pod on node.
func (t *kubeTarget) podOn(ctx context.Context, node string) (corev1.Pod, error) {
	pods, err := t.c.Pods(ctx, podLabel)
	if err != nil {
		return corev1.Pod{}, err
	}
	for _, p := range pods {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return corev1.Pod{}, fmt.Errorf("no ipfailover pod on %s", node)
}

// nodeRunning returns the processes of a node's network namespace named
// comm: the pod's, since it runs on the host network.
func nodeRunning(n *lab.Node, comm string) ([]lab.Proc, error) {
	ps, err := n.Procs()
	if err != nil {
		return nil, err
	}
	var out []lab.Proc
	for _, p := range ps {
		if p.Comm == comm {
			out = append(out, p)
		}
	}
	return out, nil
}

// entrypoint is the pid (in the host's namespace) of the one ipfailover
// process on m: its pod's PID 1.
func entrypoint(m *kube.Machine) (int, error) {
	ipf, err := nodeRunning(m.Lab(), "ipfailover")
	if err != nil {
		return 0, err
	}
	if len(ipf) != 1 {
		return 0, fmt.Errorf("%s runs %d ipfailover processes, want 1", m.Name, len(ipf))
	}
	return ipf[0].Pid, nil
}

// serviceProgram is the name of each node's checked service among the
// machine's programs.
const serviceProgram kube.Daemon = "checked-service"

// startService starts m's checked service, a host program of the node
// (this program run as "serve", in the node's namespaces and cgroup: a
// stall of the harness does not stall it, a frozen node's is frozen), and
// waits until it answers the client.
func (t *kubeTarget) startService(ctx context.Context, m *kube.Machine) error {
	argv := []string{t.o.Self, "serve", "-listen", fmt.Sprintf(":%d", ServicePort), "-name", m.Name}
	if err := m.StartProgram(ctx, string(serviceProgram), argv); err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(m.Lab().Addr4, ServicePort))
	return pollFor(ctx, m.Name+"'s service", func(ctx context.Context) error {
		body, err := t.c.Lab().Get(ctx, url)
		if err == nil && strings.TrimSpace(body) != m.Name {
			err = fmt.Errorf("answered %q", body)
		}
		return err
	})
}

// inject carries out f on the cluster, filling rec.
func (t *kubeTarget) inject(ctx context.Context, f Fault, rec *Record, began func()) error {
	var nodes []*kube.Machine
	for _, i := range f.Nodes {
		nodes = append(nodes, t.c.Nodes[i])
	}
	locked := nodes
	if kinds[f.Kind].all {
		locked = t.c.Nodes
	}
	for _, m := range locked {
		t.locks[m.Name].Lock()
	}
	defer func() {
		for _, m := range locked {
			t.locks[m.Name].Unlock()
		}
	}()
	switch f.Kind {
	case PodDelete, Drain, Rollout, ConfigRollout, CPUStarve:
		t.api.RLock()
		defer t.api.RUnlock()
	case APIServerStop:
		t.api.Lock()
		defer t.api.Unlock()
	}
	mark := func() {
		rec.Began = time.Now()
		began()
	}
	over := func() { rec.Ended = time.Now() }
	// up marks the fault's nodes back once each one's ipfailover answers
	// /readyz: the node's own state. The API's Ready lags a container
	// restarted in place and a rebooted node's pod (its status still the
	// old one's), and an API server stopped meanwhile delays it further.
	up := func() error {
		for _, m := range nodes {
			if err := t.waitReadyz(ctx, m); err != nil {
				return err
			}
		}
		rec.Recovered = time.Now()
		for _, m := range nodes {
			rec.Downs = append(rec.Downs, NodeDown{Node: slices.Index(t.c.Nodes, m), Interval: Interval{rec.Began, rec.Recovered}})
		}
		return nil
	}
	// back is up for the faults that go through the API: their pods are
	// replaced, so the API must show a Ready pod on every node first.
	back := func() error {
		if _, err := t.readyPods(ctx); err != nil {
			return err
		}
		return up()
	}
	switch f.Kind {
	case ServiceStop:
		m := nodes[0]
		mark()
		if err := hold(ctx, f.Length, func(ctx context.Context) error { return m.Kill(ctx, serviceProgram) },
			func(ctx context.Context) error { return t.startService(ctx, m) }); err != nil {
			return err
		}
		over()
		return up()
	case KeepalivedKill:
		m := nodes[0]
		// A pod just back may not have started keepalived yet.
		var ka []lab.Proc
		if err := pollFor(ctx, m.Name+"'s keepalived", func(context.Context) error {
			var err error
			if ka, err = nodeRunning(m.Lab(), "keepalived"); err == nil && len(ka) < 2 {
				err = fmt.Errorf("%s runs %d keepalived processes, want 2", m.Name, len(ka))
			}
			return err
		}); err != nil {
			return err
		}
		mark()
		for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
			for _, q := range ka {
				_ = syscall.Kill(q.Pid, sig)
			}
		}
		old := map[int]bool{}
		for _, q := range ka {
			old[q.Pid] = true
		}
		if err := pollFor(ctx, m.Name+"'s new keepalived", func(context.Context) error {
			now, err := nodeRunning(m.Lab(), "keepalived")
			if err != nil {
				return err
			}
			if len(now) < 2 || slices.ContainsFunc(now, func(q lab.Proc) bool { return old[q.Pid] }) {
				return errors.New("not restarted yet")
			}
			return nil
		}); err != nil {
			return err
		}
		over()
		return up()
	case EntrypointTerm:
		// The container's PID 1 stops; the kubelet starts it again.
		m := nodes[0]
		pid, err := entrypoint(m)
		if err != nil {
			return err
		}
		mark()
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return err
		}
		over()
		// Ready again once the new container's ipfailover (another pid)
		// answers /readyz.
		if err := pollFor(ctx, m.Name+"'s new ipfailover", func(context.Context) error {
			now, err := nodeRunning(m.Lab(), "ipfailover")
			if err == nil && (len(now) != 1 || now[0].Pid == pid) {
				err = fmt.Errorf("%d ipfailover processes, the old one's pid %d", len(now), pid)
			}
			return err
		}); err != nil {
			return err
		}
		return up()
	case PodDelete:
		m := nodes[0]
		p, err := t.podOn(ctx, m.Name)
		if err != nil {
			return err
		}
		mark()
		if err := t.c.DeletePod(ctx, p.Name); err != nil {
			return err
		}
		over()
		return back()
	case Drain:
		m := nodes[0]
		mark()
		if err := hold(ctx, f.Length, func(ctx context.Context) error {
			if err := t.c.Drain(ctx, m.Name); err != nil {
				_ = t.c.Uncordon(context.WithoutCancel(ctx), m.Name)
				return err
			}
			return nil
		}, func(ctx context.Context) error { return t.c.Uncordon(ctx, m.Name) }); err != nil {
			return err
		}
		over()
		return back()
	case NodeDeath:
		m := nodes[0]
		mark()
		// The node's checked service is a host program of the node: it
		// dies with it and starts again after the reboot.
		if err := hold(ctx, f.Length, m.Die, func(ctx context.Context) error {
			if err := m.Boot(ctx); err != nil {
				return err
			}
			return t.startService(ctx, m)
		}); err != nil {
			return err
		}
		over()
		if err := up(); err != nil {
			return err
		}
		// The node's next fault waits until the API has it Ready again.
		return t.c.WaitNodesReady(ctx)
	case NodeFreeze:
		m := nodes[0]
		mark()
		if err := hold(ctx, f.Length, func(context.Context) error { return m.Freeze() }, func(context.Context) error { return m.Thaw() }); err != nil {
			return err
		}
		over()
		return up()
	case AddressStorm:
		// The pod runs on the host network: its ipfailover's address
		// subscription is the node namespace's. The storm's ip runs
		// where this program does, outside the machine's cgroup.
		m := nodes[0]
		pid, err := entrypoint(m)
		if err != nil {
			return err
		}
		mark()
		if err := addressStorm(ctx, m.Lab(), nil, pid, f.Length); err != nil {
			return err
		}
		over()
		rec.Recovered = rec.Ended
		// The same process: a restarted container has another pid.
		return outlives(ctx, func() error {
			now, err := nodeRunning(m.Lab(), "ipfailover")
			if err == nil && (len(now) != 1 || now[0].Pid != pid || now[0].State == "Z") {
				err = fmt.Errorf("ipfailover (pid %d) on %s did not outlive the storm: now %+v", pid, m.Name, now)
			}
			return err
		})
	case CPUStarve:
		m := nodes[0]
		pid, err := entrypoint(m)
		if err != nil {
			return err
		}
		ka, err := nodeRunning(m.Lab(), "keepalived")
		if err != nil {
			return err
		}
		if len(ka) < 2 {
			return fmt.Errorf("%s runs %d keepalived processes, want 2", m.Name, len(ka))
		}
		mark()
		if err := t.starve(ctx, m, f); err != nil {
			return err
		}
		over()
		rec.Recovered = rec.Ended
		return ranThrough(m.Name, pid, ka, func() ([]lab.Proc, error) {
			now, err := nodeRunning(m.Lab(), "ipfailover")
			if err == nil && (len(now) != 1 || now[0].Pid != pid) {
				err = fmt.Errorf("ipfailover (pid %d) on %s did not run through the starvation: now %+v", pid, m.Name, now)
			}
			if err != nil {
				return nil, err
			}
			return nodeRunning(m.Lab(), "keepalived")
		})
	case LinkCut:
		m := nodes[0]
		mark()
		if err := hold(ctx, f.Length, func(context.Context) error { return m.CutLink() }, m.RestoreLink); err != nil {
			return err
		}
		over()
		return up()
	case Partition, PartitionOneWay:
		mark()
		if err := partition(ctx, nodes[0].Lab(), nodes[1].Lab(), f.Kind == Partition, f.Length); err != nil {
			return err
		}
		over()
		rec.Recovered = rec.Ended
		return nil
	case Segment:
		mark()
		if err := impairSegment(ctx, t.c.Lab(), f); err != nil {
			return err
		}
		over()
		rec.Recovered = rec.Ended
		return nil
	case Rollout, ConfigRollout:
		if f.Kind == ConfigRollout {
			// The check's period, to and fro: a change every node must
			// take, that keeps them one VRRP domain meanwhile.
			if t.config["OPENSHIFT_HA_CHECK_INTERVAL"] == "" {
				t.config = kubeConfig(t.o.AdvertInterval, "0.2")
			} else {
				t.config = kubeConfig(t.o.AdvertInterval, "")
			}
			if err := t.c.Apply(ctx, t.overlay()); err != nil {
				return err
			}
		}
		mark()
		if err := t.c.RolloutRestart(ctx, deployment); err != nil {
			return err
		}
		over()
		if err := back(); err != nil {
			return err
		}
		for i := range t.c.Nodes {
			rec.Downs = append(rec.Downs, NodeDown{Node: i, Interval: Interval{rec.Began, rec.Recovered}})
		}
		return t.readConfigs(ctx)
	case APIServerStop:
		mark()
		if err := hold(ctx, f.Length, func(ctx context.Context) error { return t.c.ControlPlane.Stop(ctx, kube.APIServer) },
			func(ctx context.Context) error { return t.c.ControlPlane.Start(ctx, kube.APIServer) }); err != nil {
			return err
		}
		if err := t.c.WaitAPI(ctx); err != nil {
			return err
		}
		over()
		rec.Recovered = rec.Ended
		return nil
	}
	return fmt.Errorf("the cluster cannot inject %s", f.Kind)
}

// burnerNamespace is where the burner pods of cpu-starve faults run: a
// workload of another team's, outside ipfailover's namespace.
const burnerNamespace = "default"

// burnerPod is the pod of a cpu-starve fault on node: the image's shell
// runs lab.BurnScript on cores loops, with a CPU request of milli
// millicores, so its cgroup's share is that much larger than
// ipfailover's. It is bound to the node (no scheduler in the way) and
// stops on SIGTERM at once.
func burnerPod(node, image string, cores, milli int) ([]byte, error) {
	grace := int64(1)
	p := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "cpu-starve-" + node, Namespace: burnerNamespace, Labels: map[string]string{"app": "cpu-starve"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "burn",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", lab.BurnScript, "sh", strconv.Itoa(cores)},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: *resource.NewMilliQuantity(int64(milli), resource.DecimalSI),
				}},
			}},
		},
	}
	return json.Marshal(p)
}

// starve runs a burner pod on m for f's length: from its container's
// start (the pod Running) to its deletion, which waits until it is gone.
// Meanwhile the machine has starvedMachineCores of this computer's cores:
// the cluster's machines share them, and a burner free to take them all
// starves the other machines, the control plane and the client as much
// as its own node (a root process's wake-up waited 189 ms with it, 8 ms
// with the same loops alone). The cores are the machine's by cpuset, not
// by a CFS quota: a quota stops the whole machine, keepalived with it,
// for the rest of every period once the burner has used it (5 handovers
// of a starved holder's VIPs in a 10-minute run at 0.2 s adverts).
func (t *kubeTarget) starve(ctx context.Context, m *kube.Machine, f Fault) error {
	pod, err := burnerPod(m.Name, t.o.Image, runtime.NumCPU(), starveCPURequest())
	if err != nil {
		return err
	}
	name := "cpu-starve-" + m.Name
	return hold(ctx, f.Length, func(ctx context.Context) error {
		if err := m.LimitCores(starvedMachineCores()); err != nil {
			return err
		}
		if _, err := t.c.KubectlInput(ctx, pod, "create", "-f", "-"); err != nil {
			return errors.Join(err, m.LimitCores(0))
		}
		if _, err := t.c.Kubectl(ctx, "-n", burnerNamespace, "wait", "--for=jsonpath={.status.phase}=Running", "pod/"+name, "--timeout=2m"); err != nil {
			var p corev1.Pod
			_ = t.c.KubectlJSON(ctx, &p, "-n", burnerNamespace, "get", "pod", name)
			_, _ = t.c.Kubectl(context.WithoutCancel(ctx), "-n", burnerNamespace, "delete", "pod", name, "--wait=true", "--timeout=1m")
			return errors.Join(fmt.Errorf("%w (phase %s: %s %s)", err, p.Status.Phase, p.Status.Reason, p.Status.Message), m.LimitCores(0))
		}
		return nil
	}, func(ctx context.Context) error {
		_, err := t.c.Kubectl(ctx, "-n", burnerNamespace, "delete", "pod", name, "--wait=true", "--timeout=1m")
		return errors.Join(err, m.LimitCores(0))
	})
}

// settled checks the cluster at the end of a run: every VIP on exactly
// one node, a Ready pod on every node, each node's processes ipfailover
// and keepalived's two, the nemesis's tables gone, the metrics agreeing
// with the holders.
func (t *kubeTarget) settled(ctx context.Context) []Check {
	var checks []Check
	hs, err := t.c.Lab().HoldersOf(labVIPs)
	if err != nil {
		checks = append(checks, Check{Name: "the holders", Detail: err.Error()})
	}
	holders := map[netip.Addr][]string{}
	for v, ns := range hs {
		for _, n := range ns {
			holders[v] = append(holders[v], n.Name)
		}
	}
	checks = append(checks, holderChecks(labVIPs, holders)...)
	_, err = t.readyPods(ctx)
	checks = append(checks, Check{Name: "a Ready ipfailover pod on every node", OK: err == nil, Detail: errString(err)})
	for _, m := range t.c.Nodes {
		n := m.Lab()
		var stray []string
		addrs, _ := n.Addrs()
		for _, a := range addrs {
			if slices.Contains(labVIPs, a.Addr()) && !slices.Contains(holders[a.Addr()], n.Name) {
				stray = append(stray, a.Addr().String())
			}
		}
		checks = append(checks, Check{Name: m.Name + ": no stray VIP", OK: len(stray) == 0, Detail: strings.Join(stray, " ")})
		tables, err := n.Tables(ctx)
		var nemesis []string
		for _, tb := range tables {
			if strings.Contains(tb, "lab_") {
				nemesis = append(nemesis, tb)
			}
		}
		checks = append(checks, Check{Name: m.Name + ": ipfailover's table, none of the nemesis's",
			OK: err == nil && slices.Contains(tables, "inet keepalived") && len(nemesis) == 0, Detail: fmt.Sprint(tables, errString(err))})
		ka, kerr := nodeRunning(n, "keepalived")
		ipf, ierr := nodeRunning(n, "ipfailover")
		zombies := 0
		for _, p := range append(ka, ipf...) {
			if p.State == "Z" {
				zombies++
			}
		}
		_, svc := m.Running(serviceProgram)
		checks = append(checks, Check{Name: m.Name + ": the checked service runs", OK: svc})
		checks = append(checks, Check{Name: m.Name + ": one ipfailover and keepalived's two processes, no zombie",
			OK:     kerr == nil && ierr == nil && len(ka) == 2 && len(ipf) == 1 && zombies == 0,
			Detail: fmt.Sprintf("%d ipfailover, %d keepalived, %d zombies%s", len(ipf), len(ka), zombies, errString(errors.Join(kerr, ierr)))})
		url := fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(n.Addr4, 9650))
		checks = append(checks, metricsChecks(ctx, t.c.Lab().HTTPClient(), m.Name, url, labVIPs, holders, t.configs()[m.Name])...)
	}
	bt, err := t.c.Lab().BridgeTables(ctx)
	checks = append(checks, Check{Name: "the bridge has no table left by the nemesis", OK: err == nil && len(bt) == 0, Detail: fmt.Sprint(bt, errString(err))})
	return checks
}

// shutdown removes the workload in docs/installation.md's order: the
// Deployment first (its pods stop gracefully; the ConfigMap and the
// ServiceAccount stay for the cleanup), then the cleanup DaemonSet, then
// the rest. It
// checks that no VIP, table or keepalived is left on any node, and brings
// the cluster down.
func (t *kubeTarget) shutdown(ctx context.Context) []Check {
	var checks []Check
	_, err := t.c.Kubectl(ctx, "-n", kube.Namespace, "delete", deployment, "--wait=true", "--timeout=3m")
	if err == nil {
		_, err = t.c.Kubectl(ctx, "-n", kube.Namespace, "wait", "--for=delete", "pod", "-l", podLabel, "--timeout=3m")
	}
	checks = append(checks, Check{Name: "the Deployment deleted, its pods gone", OK: err == nil, Detail: errString(err)})
	job := kube.Overlay{Base: "cleanup/kubernetes", Image: t.o.Image}
	err = t.c.Apply(ctx, job)
	if err == nil {
		err = t.c.RolloutStatus(ctx, "ds/remove-ipfailover")
	}
	checks = append(checks, Check{Name: "the cleanup DaemonSet cleans every node", OK: err == nil, Detail: errString(err)})
	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err = errors.Join(t.c.Delete(dctx, job), t.c.Delete(dctx, t.overlay()))
	cancel()
	checks = append(checks, Check{Name: "kubectl delete -k of the cleanup overlay and the workload's", OK: err == nil, Detail: errString(err)})
	for _, m := range t.c.Nodes {
		n := m.Lab()
		var left []string
		addrs, _ := n.Addrs()
		for _, a := range addrs {
			if slices.Contains(labVIPs, a.Addr()) {
				left = append(left, a.Addr().String())
			}
		}
		if tables, err := n.Tables(ctx); err == nil && slices.Contains(tables, "inet keepalived") {
			left = append(left, "table inet keepalived")
		}
		for _, comm := range []string{"keepalived", "ipfailover"} {
			if ps, _ := nodeRunning(n, comm); len(ps) > 0 {
				left = append(left, fmt.Sprintf("%d %s", len(ps), comm))
			}
		}
		checks = append(checks, Check{Name: m.Name + ": nothing left (no VIP, no table, no keepalived or ipfailover)", OK: len(left) == 0, Detail: strings.Join(left, ", ")})
	}
	err = t.close()
	checks = append(checks, Check{Name: "the cluster is removed (kube.Down)", OK: err == nil, Detail: errString(err)})
	return checks
}

func (t *kubeTarget) close() error {
	if t.c == nil {
		return nil
	}
	if t.stopLogs != nil {
		t.stopLogs()
		t.stopLogs = nil
	}
	t.c.Close()
	t.c = nil
	return kube.Down(context.Background(), t.o.KubeDir, t.log)
}

// kubeReadyTimeout bounds the wait for the cluster's pods to be back: a
// rebooted node's pod takes its kubelet's restart, the image's start and
// its readiness probes.
const kubeReadyTimeout = 5 * time.Minute

// pollFor polls try until it succeeds, for up to kubeReadyTimeout.
func pollFor(ctx context.Context, what string, try func(context.Context) error) error {
	deadline := time.Now().Add(kubeReadyTimeout)
	for {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := try(tctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, errors.Join(err, ctx.Err()))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
