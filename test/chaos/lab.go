package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

// ServicePort is the port of every node's checked service, which the
// client probes through the VIPs.
const ServicePort = 8080

// labVIPs are the VIPs of a lab run: three IPv4 VIPs and one IPv6, each in
// its own VRRP instance.
var labVIPs = []netip.Addr{
	netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101"), netip.MustParseAddr("192.0.2.102"),
	netip.MustParseAddr("2001:db8::100"),
}

// labEnv is every lab node's ipfailover environment.
func labEnv(advert string) []string {
	env := []string{
		"OPENSHIFT_HA_CONFIG_NAME=chaos",
		"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-102,2001:db8::100",
		fmt.Sprintf("OPENSHIFT_HA_MONITOR_PORT=%d", ServicePort),
		"OPENSHIFT_HA_REPLICA_COUNT=3",
		"OPENSHIFT_HA_NFTABLES_RULE=true",
	}
	if advert != "" {
		env = append(env, "OPENSHIFT_HA_ADVERT_INTERVAL="+advert)
	}
	return env
}

// configPath is where ipfailover writes keepalived.conf in a node.
const configPath = "/etc/keepalived/keepalived.conf"

// labTarget is the namespace lab: three nodes running the real ipfailover
// and keepalived, each with its checked service, and a client.
type labTarget struct {
	o   Options
	c   *lab.Cluster
	env []string
	log *slog.Logger

	// mu guards procs and surprises.
	mu    sync.Mutex
	procs map[*lab.Node]*nodeProcs
	// surprises are processes that exited without the nemesis asking.
	surprises []string
	// locks serialise faults on a node.
	locks map[*lab.Node]*sync.Mutex
	confs map[string]*keepalived.Conf
	out   map[*lab.Node]*lab.Output
	// cgroup is the lab's cgroup (makeCgroups), groups each node's;
	// harnessFrom is the group this program left for the lab's.
	cgroup      string
	groups      map[*lab.Node]nodeGroups
	harnessFrom *lab.CPUGroup
	// softirq are the kernel's ksoftirqd threads, real-time for the run
	// (makeCgroups).
	softirq *lab.SoftirqThreads
}

// nodeGroups are a node's cgroups below the lab's: its checked service's
// and an address storm's, with a program's default share, ipfailover's and
// the burner's of a cpu-starve fault, with the shares of their pods' CPU
// requests on the cluster.
type nodeGroups struct {
	svc, storm, ipf, burner *lab.CPUGroup
}

// nodeProcs are a node's service and ipfailover, and which of their exits
// the nemesis caused.
type nodeProcs struct {
	svc, ipf *lab.Process
	expected map[*lab.Process]bool
}

// labPrograms are the host's programs the lab's nodes run: a machine
// without one fails every node's start, which shows only as a fleet that
// never settles.
var labPrograms = []string{"keepalived", "iptables", "nft", "ip", "nsenter"}

func newLabTarget(ctx context.Context, o Options) (*labTarget, error) {
	for _, p := range labPrograms {
		if _, err := exec.LookPath(p); err != nil {
			return nil, fmt.Errorf("%s is not installed: run make deps (./scripts/install-deps.sh)", p)
		}
	}
	level := slog.LevelWarn
	if o.Verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(o.logWriter(), &slog.HandlerOptions{Level: level}))
	c, err := lab.New(ctx, lab.Options{Nodes: 3, Logger: log})
	if err != nil {
		return nil, err
	}
	t := &labTarget{o: o, c: c, env: labEnv(o.AdvertInterval), log: log,
		procs: map[*lab.Node]*nodeProcs{}, locks: map[*lab.Node]*sync.Mutex{}, out: map[*lab.Node]*lab.Output{}}
	for _, n := range c.Nodes {
		t.procs[n] = &nodeProcs{expected: map[*lab.Process]bool{}}
		t.locks[n] = &sync.Mutex{}
		var copyTo io.Writer
		if o.NodeOut != nil {
			copyTo = lab.PrefixWriter(o.NodeOut, &sync.Mutex{}, n.Name+": ")
		}
		t.out[n] = lab.NewOutput(copyTo)
	}
	if err := t.makeCgroups(ctx); err != nil {
		return nil, errors.Join(err, t.close())
	}
	return t, nil
}

// makeCgroups gives the lab a cgroup of the cpu controller and each node
// one below it, as a machine of its own; in a node's, its checked
// service's (a program of the node's own, beside the pods as on the
// cluster), an address storm's (its kernel work is the node's load),
// ipfailover's (where its processes, keepalived's included, run) and a
// burner's, with the CPU shares of the manifests' request and of the
// burner pod's on the cluster. A burner starves its own node, not the
// services of the others. This program, the client and the segment's
// delay among its work, runs in the lab's group too, with four nodes'
// share (harnessMachines): a burner must not starve the measurement, nor
// the measurement the nodes.
func (t *labTarget) makeCgroups(ctx context.Context) error {
	t.cgroup = "ipfailover-chaos-" + t.c.Name
	t.groups = map[*lab.Node]nodeGroups{}
	// The lab weighs against the kernel's own threads (ksoftirqd, the
	// workqueues' workers, which run in the root group) as a real node's
	// pods do against its kernel: one machine's cores, not its three
	// nodes'. At three machines' share a burner and the harness keep
	// ksoftirqd from the CPU, and with it every packet's softirq work of
	// every node.
	machine := runtime.NumCPU() * 1000
	if _, err := lab.NewCPUGroup(t.cgroup, machine); err != nil {
		return err
	}
	// Even so ksoftirqd waits behind the lab's cgroup, and with it a
	// whole node: the lab's one kernel carries the softirq work of three
	// nodes, the segment and the client, a real node's only its own. At
	// the real-time class it runs when it is woken, as that work does
	// when it runs where it was raised. Where the lab cannot raise the
	// threads (a container's own PID namespace shows none of them) the
	// run goes on and says so: its faults and invariants hold as they
	// do, its timings are the fair class's.
	softirq, err := lab.FindSoftirqThreads()
	if err == nil {
		err = softirq.RealTime(ctx)
	}
	switch {
	case errors.Is(err, lab.ErrSoftirqUnavailable):
		t.log.Warn("the run goes on with the kernel's softirq threads at the fair class: its figures may show the kernel's softirq work late", "reason", err)
	case err != nil:
		return err
	default:
		t.softirq = softirq
	}
	from, err := lab.CPUGroupOf(os.Getpid())
	if err != nil {
		return err
	}
	harness, err := lab.NewCPUGroup(t.cgroup+"/harness", harnessMachines*machine)
	if err != nil {
		return err
	}
	if err := harness.Add(os.Getpid()); err != nil {
		return err
	}
	t.harnessFrom = from
	for _, n := range t.c.Nodes {
		if _, err := lab.NewCPUGroup(t.cgroup+"/"+n.Name, machine); err != nil {
			return err
		}
		svc, err := lab.NewCPUGroup(t.cgroup+"/"+n.Name+"/service", programCPU)
		if err != nil {
			return err
		}
		storm, err := lab.NewCPUGroup(t.cgroup+"/"+n.Name+"/storm", programCPU)
		if err != nil {
			return err
		}
		ipf, err := lab.NewCPUGroup(t.cgroup+"/"+n.Name+"/ipfailover", ipfailoverCPURequest)
		if err != nil {
			return err
		}
		burner, err := lab.NewCPUGroup(t.cgroup+"/"+n.Name+"/burner", starveCPURequest())
		if err != nil {
			return err
		}
		t.groups[n] = nodeGroups{svc: svc, storm: storm, ipf: ipf, burner: burner}
	}
	return nil
}

func (t *labTarget) name() string { return "lab" }

func (t *labTarget) nodeNames() []string {
	var names []string
	for _, n := range t.c.Nodes {
		names = append(names, n.Name)
	}
	return names
}

func (t *labTarget) vips() []netip.Addr { return labVIPs }

func (t *labTarget) settings() []string { return t.env }

func (t *labTarget) observed() []Observed {
	var obs []Observed
	for _, n := range t.c.Nodes {
		obs = append(obs, Observed{Name: n.Name, Netns: n.Netns, Link: lab.Link, Addr4: n.Addr4, Addr6: n.Addr6})
	}
	return obs
}

func (t *labTarget) clientNetns() string { return t.c.Client.Netns }

func (t *labTarget) dialer() (Dialer, func(), error) {
	d, err := t.c.ClientDialer()
	if err != nil {
		return nil, nil, err
	}
	return d.DialContext, d.Close, nil
}

// start starts every node's service and ipfailover and waits until the
// holders have settled.
func (t *labTarget) start(ctx context.Context) error {
	if t.o.Progress != nil {
		fmt.Fprintf(t.o.Progress, "lab: network namespaces %s%s-* (the client %s)\n", lab.NetnsPrefix, t.c.Name, t.c.Client.Netns)
	}
	for _, n := range t.c.Nodes {
		if err := t.startService(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range t.c.Nodes {
		if err := t.waitService(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range t.c.Nodes {
		if err := t.startIPFailover(ctx, n); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := t.c.WaitStable(wctx, labVIPs, 3*t.advert()); err != nil {
		return fmt.Errorf("the fleet did not settle: %w", err)
	}
	t.confs = map[string]*keepalived.Conf{}
	for _, n := range t.c.Nodes {
		b, err := t.ipf(n).ReadFile(configPath)
		if err != nil {
			return fmt.Errorf("reading %s's keepalived.conf: %w", n.Name, err)
		}
		conf, err := keepalived.Parse(b)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		t.confs[n.Name] = conf
	}
	return nil
}

func (t *labTarget) configs() map[string]*keepalived.Conf { return t.confs }

// advert is the fleet's advert interval.
func (t *labTarget) advert() time.Duration { return advertOf(t.o.AdvertInterval) }

func (t *labTarget) ipf(n *lab.Node) *lab.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[n].ipf
}

func (t *labTarget) svc(n *lab.Node) *lab.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[n].svc
}

func (t *labTarget) startService(ctx context.Context, n *lab.Node) error {
	p, err := n.Start(ctx, []string{t.o.Self, "serve", "-listen", fmt.Sprintf(":%d", ServicePort), "-name", n.Name}, nil, t.out[n])
	if err != nil {
		return err
	}
	if err := t.groups[n].svc.Add(p.Pid); err != nil {
		_ = p.Kill()
		return err
	}
	t.mu.Lock()
	t.procs[n].svc = p
	t.mu.Unlock()
	t.watch(ctx, n, p, "the service")
	return nil
}

func (t *labTarget) startIPFailover(ctx context.Context, n *lab.Node) error {
	p, err := n.Start(ctx, []string{t.o.Binary, "run"}, t.env, t.out[n])
	if err != nil {
		return err
	}
	// Before it starts keepalived, which is born in its group.
	if err := t.groups[n].ipf.Add(p.Pid); err != nil {
		_ = p.Kill()
		return err
	}
	t.mu.Lock()
	t.procs[n].ipf = p
	t.mu.Unlock()
	t.watch(ctx, n, p, "ipfailover")
	return nil
}

// watch notes an exit of p the nemesis did not cause, and starts the
// program again a second later, as the kubelet would.
func (t *labTarget) watch(ctx context.Context, n *lab.Node, p *lab.Process, what string) {
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-p.Done():
		}
		t.mu.Lock()
		np := t.procs[n]
		expected := np.expected[p]
		delete(np.expected, p)
		current := np.svc == p || np.ipf == p
		t.mu.Unlock()
		if expected || !current || ctx.Err() != nil {
			return
		}
		code, _ := p.Wait(context.Background())
		t.mu.Lock()
		t.surprises = append(t.surprises, fmt.Sprintf("%s on %s exited %d at %s without the nemesis stopping it", what, n.Name, code, time.Now().Format(time.StampMilli)))
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		var err error
		if what == "ipfailover" {
			err = t.startIPFailover(ctx, n)
		} else {
			err = t.startService(ctx, n)
		}
		if err != nil {
			t.mu.Lock()
			t.surprises = append(t.surprises, fmt.Sprintf("starting %s on %s again: %v", what, n.Name, err))
			t.mu.Unlock()
		}
	}()
}

// expect marks p's coming exit as the nemesis's doing.
func (t *labTarget) expect(n *lab.Node, ps ...*lab.Process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range ps {
		if p != nil {
			t.procs[n].expected[p] = true
		}
	}
}

// waitService waits until n's service answers on the node's address.
func (t *labTarget) waitService(ctx context.Context, n *lab.Node) error {
	url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(n.Addr4, ServicePort))
	return t.poll(ctx, n.Name+"'s service", func(ctx context.Context) error {
		body, err := t.c.Get(ctx, url)
		if err == nil && strings.TrimSpace(body) != n.Name {
			err = fmt.Errorf("answered %q", body)
		}
		return err
	})
}

// waitReady waits until n's ipfailover answers /readyz with 200 and its
// check passes (see checkPasses).
func (t *labTarget) waitReady(ctx context.Context, n *lab.Node) error {
	return t.poll(ctx, n.Name+"'s /readyz and check", func(ctx context.Context) error {
		return readyAndChecked(ctx, t.c, n.Addr4)
	})
}

// readyTimeout bounds the wait for a node's programs to be back.
const readyTimeout = 60 * time.Second

func (t *labTarget) poll(ctx context.Context, what string, try func(context.Context) error) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		err := try(tctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, errors.Join(err, ctx.Err()))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// lock takes the faults' locks of nodes, in node order.
func (t *labTarget) lock(nodes []*lab.Node) func() {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b *lab.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		t.locks[n].Lock()
	}
	return func() {
		for _, n := range nodes {
			t.locks[n].Unlock()
		}
	}
}

// inject carries out f from start to end, filling rec's times and notes.
// began is called when the fault is injected.
func (t *labTarget) inject(ctx context.Context, f Fault, rec *Record, began func()) error {
	var nodes []*lab.Node
	for _, i := range f.Nodes {
		nodes = append(nodes, t.c.Nodes[i])
	}
	if f.Kind == Rollout {
		return t.rollout(ctx, rec, began)
	}
	unlock := t.lock(nodes)
	defer unlock()
	mark := func() {
		rec.Began = time.Now()
		began()
	}
	down := func(n *lab.Node) {
		rec.Downs = append(rec.Downs, NodeDown{Node: slices.Index(t.c.Nodes, n), Interval: Interval{rec.Began, rec.Recovered}})
	}
	switch f.Kind {
	case ServiceStop:
		n := nodes[0]
		p := t.svc(n)
		t.expect(n, p)
		mark()
		if err := p.Kill(); err != nil {
			return err
		}
		<-p.Done()
		// Its listening socket goes with the process: until then the
		// node's kernel still accepts the check's connections.
		rec.Effective = time.Now()
		if late := rec.Effective.Sub(rec.Began); late > 20*time.Millisecond {
			rec.Notes = append(rec.Notes, fmt.Sprintf("the service's process was gone %s after the SIGKILL", fmtDur(late)))
		}
		if err := sleep(ctx, f.Length); err != nil {
			return err
		}
		if err := t.startService(ctx, n); err != nil {
			return err
		}
		if err := t.waitService(ctx, n); err != nil {
			return err
		}
		rec.Ended = time.Now()
		if err := t.waitReady(ctx, n); err != nil {
			return err
		}
		rec.Recovered = time.Now()
		down(n)
	case KeepalivedKill:
		n := nodes[0]
		p := t.ipf(n)
		ka, err := p.Find("keepalived")
		if err != nil {
			return err
		}
		if len(ka) == 0 {
			return fmt.Errorf("%s runs no keepalived", n.Name)
		}
		mark()
		// Stopped first, so the VRRP child cannot say goodbye when its
		// parent dies.
		for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
			for _, q := range ka {
				_ = syscall.Kill(q.Pid, sig)
			}
		}
		// Back once the supervisor started a new keepalived (new pids)
		// and it runs every instance.
		old := map[int]bool{}
		for _, q := range ka {
			old[q.Pid] = true
		}
		if err := t.poll(ctx, n.Name+"'s new keepalived", func(context.Context) error {
			now, err := p.Find("keepalived")
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
		rec.Ended = time.Now()
		if err := t.waitReady(ctx, n); err != nil {
			return err
		}
		rec.Recovered = time.Now()
		down(n)
	case EntrypointTerm:
		n := nodes[0]
		p := t.ipf(n)
		t.expect(n, p)
		mark()
		if err := terminate(ctx, n, p, rec); err != nil {
			return err
		}
		if err := sleep(ctx, f.Length); err != nil {
			return err
		}
		if err := t.startIPFailover(ctx, n); err != nil {
			return err
		}
		rec.Ended = time.Now()
		if err := t.waitReady(ctx, n); err != nil {
			return err
		}
		rec.Recovered = time.Now()
		down(n)
	case NodeDeath:
		n := nodes[0]
		t.expect(n, t.svc(n), t.ipf(n))
		mark()
		n.KillAll()
		if err := sleep(ctx, f.Length); err != nil {
			return err
		}
		if err := t.startService(ctx, n); err != nil {
			return err
		}
		if err := t.startIPFailover(ctx, n); err != nil {
			return err
		}
		rec.Ended = time.Now()
		if err := t.waitService(ctx, n); err != nil {
			return err
		}
		if err := t.waitReady(ctx, n); err != nil {
			return err
		}
		rec.Recovered = time.Now()
		down(n)
	case NodeFreeze:
		n := nodes[0]
		mark()
		if err := hold(ctx, f.Length, func(context.Context) error { return n.Freeze() }, func(context.Context) error { return n.Thaw() }); err != nil {
			return err
		}
		rec.Ended = time.Now()
		rec.Recovered = rec.Ended
		down(n)
	case AddressStorm:
		n := nodes[0]
		p := t.ipf(n)
		if p.Exited() {
			return fmt.Errorf("%s runs no ipfailover", n.Name)
		}
		mark()
		if err := addressStorm(ctx, n, t.groups[n].storm, p.Pid, f.Length); err != nil {
			return err
		}
		rec.Ended = time.Now()
		rec.Recovered = rec.Ended
		// An exit is also a surprise (the settled checks), and watch
		// starts ipfailover again: this names the storm as its cause.
		if err := outlives(ctx, func() error {
			if !p.Exited() {
				return nil
			}
			code, _ := p.Wait(context.Background())
			return fmt.Errorf("ipfailover (pid %d) on %s exited %d after the storm%s", p.Pid, n.Name, code, panicLine(t.out[n].String()))
		}); err != nil {
			return err
		}
	case CPUStarve:
		n := nodes[0]
		p := t.ipf(n)
		ka, err := p.Find("keepalived")
		if err != nil {
			return err
		}
		if p.Exited() || len(ka) < 2 {
			return fmt.Errorf("%s runs no ipfailover and keepalived's two processes (%d keepalived)", n.Name, len(ka))
		}
		g := t.groups[n]
		for _, q := range append(ka, lab.Proc{Pid: p.Pid}) {
			if in, err := g.ipf.Has(q.Pid); err != nil || !in {
				return fmt.Errorf("%s: pid %d (%s) is not in cgroup %s%s", n.Name, q.Pid, q.Comm, g.ipf.Path, errString(err))
			}
		}
		mark()
		b, err := n.Burn(ctx, runtime.NumCPU(), g.burner)
		if err != nil {
			return err
		}
		serr := sleep(ctx, f.Length)
		_ = b.Kill()
		<-b.Done()
		rec.Ended = time.Now()
		rec.Recovered = rec.Ended
		if serr != nil {
			return serr
		}
		return ranThrough(n.Name, p.Pid, ka, func() ([]lab.Proc, error) {
			if p.Exited() {
				return nil, fmt.Errorf("ipfailover (pid %d) on %s exited", p.Pid, n.Name)
			}
			return p.Find("keepalived")
		})
	case LinkCut:
		n := nodes[0]
		mark()
		if err := hold(ctx, f.Length, n.CutLink, n.RestoreLink); err != nil {
			return err
		}
		rec.Ended = time.Now()
		rec.Recovered = rec.Ended
		down(n)
	case Partition, PartitionOneWay:
		mark()
		if err := partition(ctx, nodes[0], nodes[1], f.Kind == Partition, f.Length); err != nil {
			return err
		}
		rec.Ended = time.Now()
		rec.Recovered = rec.Ended
	case Segment:
		mark()
		if err := impairSegment(ctx, t.c, f); err != nil {
			return err
		}
		rec.Ended = time.Now()
		rec.Recovered = rec.Ended
	default:
		return fmt.Errorf("the lab cannot inject %s", f.Kind)
	}
	return nil
}

// rollout restarts ipfailover on every node, one at a time, each waited
// for until /readyz answers, as deploy/'s RollingUpdate does.
func (t *labTarget) rollout(ctx context.Context, rec *Record, began func()) error {
	unlock := t.lock(t.c.Nodes)
	defer unlock()
	for i, n := range t.c.Nodes {
		p := t.ipf(n)
		t.expect(n, p)
		from := time.Now()
		if i == 0 {
			rec.Began = from
			began()
		}
		if err := terminate(ctx, n, p, rec); err != nil {
			return err
		}
		if err := t.startIPFailover(ctx, n); err != nil {
			return err
		}
		if err := t.waitReady(ctx, n); err != nil {
			return err
		}
		rec.Downs = append(rec.Downs, NodeDown{Node: i, Interval: Interval{from, time.Now()}})
	}
	rec.Ended = time.Now()
	rec.Recovered = rec.Ended
	return nil
}

// terminate stops n's ipfailover p with SIGTERM and waits for it to exit,
// noting in rec an exit other than 0.
func terminate(ctx context.Context, n *lab.Node, p *lab.Process, rec *Record) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	code, err := p.Wait(wctx)
	cancel()
	if err != nil {
		return err
	}
	if code != 0 {
		rec.Notes = append(rec.Notes, fmt.Sprintf("ipfailover on %s exited %d after SIGTERM, want 0", n.Name, code))
	}
	return nil
}

// panicLine returns ": " and the last line of out that starts a Go panic,
// or nothing.
func panicLine(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "panic: ") {
			return ": " + strings.TrimSpace(lines[i])
		}
	}
	return ""
}

// seed is the seed of a segment fault's delays.
func (f Fault) seed() uint64 { return uint64(f.Index)*0x9e3779b97f4a7c15 + uint64(f.Start) }

// surprised returns the unexpected exits so far.
func (t *labTarget) surprised() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.surprises)
}

// hc is an HTTP client from the client's namespace.
func (t *labTarget) hc() *http.Client { return t.c.HTTPClient() }

func (t *labTarget) metricsURL(node string) string {
	n := t.c.Node(node)
	return fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(n.Addr4, 9650))
}

func (t *labTarget) close() error {
	err := errors.Join(t.keepNodeLogs(), t.c.Close())
	if t.harnessFrom != nil {
		err = errors.Join(err, t.harnessFrom.Add(os.Getpid()))
		t.harnessFrom = nil
	}
	if t.cgroup != "" {
		err = errors.Join(err, lab.RemoveCPUGroup(t.cgroup))
	}
	if t.softirq != nil {
		err = errors.Join(err, t.softirq.Restore())
		t.softirq = nil
	}
	if left, lerr := t.c.Leftovers(); lerr != nil || len(left) > 0 {
		err = errors.Join(err, lerr, fmt.Errorf("namespaces left: %v", left))
	}
	return err
}

// keepNodeLogs writes everything each node's programs printed (the
// service, ipfailover, keepalived) to o.Out/logs/NODE.log, with or without
// -v: a fault seen once in a report is read from its run's own logs.
func (t *labTarget) keepNodeLogs() error {
	if t.o.Out == "" {
		return nil
	}
	dir := filepath.Join(t.o.Out, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var err error
	for _, n := range t.c.Nodes {
		err = errors.Join(err, os.WriteFile(filepath.Join(dir, n.Name+".log"), []byte(t.out[n].String()), 0o644))
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// settled checks the cluster at the end of a run, the fleet still
// running: every VIP on exactly one node and nowhere else, each node's
// tables and processes what ipfailover alone makes, the metrics agreeing
// with the holders, and no program that died on its own.
func (t *labTarget) settled(ctx context.Context) []Check {
	var checks []Check
	holders := map[netip.Addr][]string{}
	stray := []string{}
	for _, n := range t.c.Nodes {
		addrs, err := n.Addrs()
		if err != nil {
			checks = append(checks, Check{Name: "addresses of " + n.Name, Detail: err.Error()})
			continue
		}
		up, _ := n.Up()
		for _, a := range addrs {
			if !slices.Contains(labVIPs, a.Addr()) {
				continue
			}
			if !up {
				stray = append(stray, fmt.Sprintf("%s on %s, whose link is down", a.Addr(), n.Name))
				continue
			}
			holders[a.Addr()] = append(holders[a.Addr()], n.Name)
		}
	}
	checks = append(checks, holderChecks(labVIPs, holders)...)
	checks = append(checks, Check{Name: "no stray VIP (a VIP on a node whose link is down)", OK: len(stray) == 0, Detail: strings.Join(stray, "; ")})

	for _, n := range t.c.Nodes {
		tables, err := n.Tables(ctx)
		checks = append(checks, Check{Name: n.Name + ": nftables tables are ipfailover's alone (inet keepalived)",
			OK: err == nil && slices.Equal(tables, []string{"inet keepalived"}), Detail: fmt.Sprint(tables, errString(err))})
	}
	bt, err := t.c.BridgeTables(ctx)
	checks = append(checks, Check{Name: "the bridge has no table left by the nemesis", OK: err == nil && len(bt) == 0, Detail: fmt.Sprint(bt, errString(err))})

	for _, n := range t.c.Nodes {
		ps, err := n.Procs()
		var comms []string
		zombies := 0
		for _, p := range ps {
			comms = append(comms, p.Comm)
			if p.State == "Z" {
				zombies++
			}
		}
		slices.Sort(comms)
		want := []string{comm(t.o.Self), comm(t.o.Binary), "keepalived", "keepalived"}
		slices.Sort(want)
		checks = append(checks, Check{Name: n.Name + ": processes are the service, ipfailover and keepalived's two, no zombie",
			OK: err == nil && slices.Equal(comms, want) && zombies == 0, Detail: fmt.Sprintf("%v, %d zombies%s", comms, zombies, errString(err))})
	}
	for _, n := range t.c.Nodes {
		checks = append(checks, metricsChecks(ctx, t.hc(), n.Name, t.metricsURL(n.Name), labVIPs, holders, t.confs[n.Name])...)
	}
	s := t.surprised()
	checks = append(checks, Check{Name: "no program exited without the nemesis stopping it", OK: len(s) == 0, Detail: strings.Join(s, "; ")})
	return checks
}

// shutdown stops every node's ipfailover (SIGTERM: exit 0, VIPs released),
// runs remove-failover on each (exit 0: the nftables table gone), and
// checks that nothing of ipfailover is left on any node; then removes the
// lab and checks no namespace is left.
func (t *labTarget) shutdown(ctx context.Context) []Check {
	var checks []Check
	for _, n := range t.c.Nodes {
		p := t.ipf(n)
		t.expect(n, p)
		err := p.Signal(syscall.SIGTERM)
		code := -1
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 35*time.Second)
			code, err = p.Wait(wctx)
			cancel()
		}
		checks = append(checks, Check{Name: n.Name + ": ipfailover stops on SIGTERM with exit 0", OK: err == nil && code == 0, Detail: fmt.Sprintf("exit %d%s", code, errString(err))})
	}
	for _, n := range t.c.Nodes {
		out := lab.NewOutput(nil)
		p, err := n.Start(ctx, []string{t.o.Binary, "remove-failover"}, t.env, out)
		code := -1
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			code, err = p.Wait(wctx)
			cancel()
		}
		checks = append(checks, Check{Name: n.Name + ": remove-failover exits 0", OK: err == nil && code == 0, Detail: fmt.Sprintf("exit %d%s %s", code, errString(err), lastLine(out.String()))})
		addrs, _ := n.Addrs()
		var vips []string
		for _, a := range addrs {
			if slices.Contains(labVIPs, a.Addr()) {
				vips = append(vips, a.Addr().String())
			}
		}
		tables, terr := n.Tables(ctx)
		ps, _ := n.Procs()
		var left []string
		for _, q := range ps {
			if q.Comm == "keepalived" || q.Comm == "ipfailover" {
				left = append(left, fmt.Sprintf("%s pid %d", q.Comm, q.Pid))
			}
		}
		checks = append(checks, Check{Name: n.Name + ": nothing left (no VIP, no table, no keepalived or ipfailover)",
			OK:     len(vips) == 0 && terr == nil && len(tables) == 0 && len(left) == 0,
			Detail: fmt.Sprintf("VIPs %v, tables %v, processes %v%s", vips, tables, left, errString(terr))})
	}
	err := t.close()
	checks = append(checks, Check{Name: "the lab is removed: no namespace or process left", OK: err == nil, Detail: errString(err)})
	return checks
}

// comm is the command name the kernel gives a process of the program at
// path: the file name's first 15 bytes.
func comm(path string) string {
	name := filepath.Base(path)
	return name[:min(len(name), 15)]
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
