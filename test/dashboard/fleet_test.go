package dashboard

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

var drawPicture = flag.Bool("picture", false, "draw the dashboard's main panels from the run's series into "+picturePath)

// The lab's deployment: three VIPs on three nodes, the peers from the pods.
var vips = []netip.Addr{netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101"), netip.MustParseAddr("192.0.2.102")}

const (
	vipsEnv = "192.0.2.100-102"
	// servicePort is each node's checked service.
	servicePort = 8080
	// apiPort is the lab API server's.
	apiPort = 6443
	// firstVRID is the deployment's first router id (offset 10, as the
	// manifests have it).
	firstVRID = 11
)

// podName is the pod of ipfailover on node n.
func podName(n *lab.Node) string { return "ipfailover-" + n.Name }

// withSecrets puts the service account's files where a pod has them, then
// runs the rest of the command line: a node's /run is its own.
const withSecrets = `mkdir -p /run/secrets/kubernetes.io/serviceaccount && cp "$0"/* /run/secrets/kubernetes.io/serviceaccount/ && exec "$@"`

// run is one run of the lab fleet with Prometheus scraping it.
type run struct {
	t       *testing.T
	ctx     context.Context
	c       *lab.Cluster
	bin     string
	api     *apiServer
	apiAddr netip.Addr

	procs    map[*lab.Node]*lab.Process
	services map[*lab.Node]*lab.Service
	outputs  []namedOutput
	// steps are what the run did, and when: the picture's markers.
	steps []step
}

type namedOutput struct {
	name string
	out  *lab.Output
}

// step is something the run did to the fleet.
type step struct {
	At   time.Time
	What string
}

func (r *run) did(what string) {
	r.steps = append(r.steps, step{time.Now(), what})
	r.t.Logf("%s", what)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestDashboardOnAFleet runs the real ipfailover and keepalived on three lab
// nodes with the peers from the pods (a lab API server), a real Prometheus
// scraping them every second, and puts the fleet through what the
// dashboard shows: a stopped service, a SIGTERM, a dead node, a killed
// keepalived, a foreign VRRP speaker, a stray VIP and another host
// answering for a VIP. Then every query of the committed dashboard must
// parse, narrow every selector by the namespace variable, name only
// metrics Prometheus stored from the nodes, return series, and carry the
// labels its legend names.
func TestDashboardOnAFleet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("builds network, PID and mount namespaces: needs root")
	}
	for _, p := range []string{"keepalived", "iptables", "ip6tables", "nsenter", "ip", "nft"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("needs %s on PATH (./scripts/install-deps.sh)", p)
		}
	}
	promBin := prometheusBinary()
	if promBin == "" {
		t.Skip("no prometheus: make test builds it (pinned) and sets PROMETHEUS")
	}
	d := readCommitted(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("/var/tmp", "ipfailover-dashboard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "ipfailover")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/ipfailover").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	c, err := lab.New(ctx, lab.Options{Nodes: 3, Hosts: []string{"apiserver", "prometheus"},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, ctx: ctx, c: c, bin: bin, procs: map[*lab.Node]*lab.Process{}, services: map[*lab.Node]*lab.Service{}}
	t.Cleanup(func() {
		if t.Failed() {
			r.dump()
		}
		if r.api != nil {
			r.api.Close()
		}
		for _, s := range r.services {
			s.Stop()
		}
		if err := c.Close(); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
	})

	apiHost := c.Host("apiserver")
	r.apiAddr = apiHost.Addr4
	var pods []string
	for _, n := range c.Nodes {
		pods = append(pods, podName(n))
	}
	var ln net.Listener
	err = lab.InNetns(apiHost.Netns, func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("%s:%d", r.apiAddr, apiPort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.api, err = newAPIServer(ln, r.apiAddr, dir, pods...); err != nil {
		ln.Close()
		t.Fatal(err)
	}

	prom, err := startPrometheus(ctx, promBin, c.Host("prometheus"), c.Nodes, podName, dir)
	if err != nil {
		t.Fatal(err)
	}
	r.outputs = append(r.outputs, namedOutput{"prometheus", prom.out})
	for _, n := range c.Nodes {
		r.startService(n)
	}

	start := time.Now()
	for _, n := range c.Nodes {
		r.start(n)
	}
	if _, err := c.WaitOneHolder(ctx, vips, nil); err != nil {
		t.Fatal(err)
	}
	h, err := c.WaitStable(ctx, vips, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started: %s", h)
	r.faults(h)
	// The last scrapes of what the faults left.
	time.Sleep(3 * scrapeInterval)
	end := time.Now()
	t.Logf("the run took %s", end.Sub(start).Round(time.Second))

	results := r.checkQueries(prom, d, start, end)
	if *drawPicture && !t.Failed() {
		if err := writePicture(picturePath, d, results, r.steps, start, end); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", picturePath)
	}
}

// startService starts n's checked service.
func (r *run) startService(n *lab.Node) {
	r.t.Helper()
	s, err := lab.ServeNameIn(n.Netns, fmt.Sprintf("0.0.0.0:%d", servicePort), n.Name)
	if err != nil {
		r.t.Fatal(err)
	}
	r.services[n] = s
}

// start starts ipfailover on n as its pod would run it.
func (r *run) start(n *lab.Node) {
	r.t.Helper()
	env := []string{
		"OPENSHIFT_HA_VIRTUAL_IPS=" + vipsEnv,
		fmt.Sprintf("OPENSHIFT_HA_MONITOR_PORT=%d", servicePort),
		fmt.Sprintf("OPENSHIFT_HA_VRRP_ID_OFFSET=%d", firstVRID-1),
		"OPENSHIFT_HA_UNICAST_PEERS_FROM=pods",
		"POD_NAME=" + podName(n),
		"POD_NAMESPACE=" + podNamespace,
		"KUBERNETES_SERVICE_HOST=" + r.apiAddr.String(),
		fmt.Sprintf("KUBERNETES_SERVICE_PORT=%d", apiPort),
	}
	out := lab.NewOutput(nil)
	p, err := n.Start(r.ctx, []string{"sh", "-c", withSecrets, r.api.secrets, r.bin, "run"}, env, out)
	if err != nil {
		r.t.Fatal(err)
	}
	r.procs[n] = p
	r.outputs = append(r.outputs, namedOutput{"ipfailover " + n.Name, out})
}

// dump logs every process's output.
func (r *run) dump() {
	for _, o := range r.outputs {
		r.t.Logf("----- output of %s -----\n%s\n----- end of %s -----", o.name, strings.TrimRight(o.out.String(), "\n"), o.name)
	}
}

// fatal ends the test with err, naming what was under way.
func (r *run) fatal(what string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
}

// moved waits until vip has one holder other than from.
func (r *run) moved(vip netip.Addr, from *lab.Node) lab.HolderMap {
	r.t.Helper()
	m, err := r.c.WaitOneHolder(r.ctx, vips, func(m lab.HolderMap) bool { return m[vip] != from })
	r.fatal(fmt.Sprintf("waiting for %s to leave %s", vip, from.Name), err)
	return m
}

// until polls cond every lab.PollInterval until it holds.
func (r *run) until(what string, cond func() (bool, error)) {
	r.t.Helper()
	for {
		ok, err := cond()
		r.fatal(what, err)
		if ok {
			return
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("waiting for %s: %v", what, r.ctx.Err())
		case <-time.After(lab.PollInterval):
		}
	}
}

// metrics is n's /metrics, read from the client namespace ("" while it
// does not answer).
func (r *run) metrics(n *lab.Node) string {
	body, err := r.c.Get(r.ctx, fmt.Sprintf("http://%s:9650/metrics", n.Addr4))
	if err != nil {
		return ""
	}
	return body
}

// ready waits until n's ipfailover is ready: every instance runs.
func (r *run) ready(n *lab.Node) {
	r.t.Helper()
	r.until(n.Name+" ready", func() (bool, error) {
		_, err := r.c.Get(r.ctx, fmt.Sprintf("http://%s:9650/readyz", n.Addr4))
		return err == nil, nil
	})
}

// shows waits until n's metrics have a line that matches re.
func (r *run) shows(n *lab.Node, re string) {
	r.t.Helper()
	m := regexp.MustCompile("(?m)" + re)
	r.until(n.Name+" serving "+re, func() (bool, error) { return m.MatchString(r.metrics(n)), nil })
}

// other returns a node that is not in not.
func (r *run) other(not ...*lab.Node) *lab.Node {
	for _, n := range r.c.Nodes {
		if !slices.Contains(not, n) {
			return n
		}
	}
	r.t.Fatal("no node left")
	return nil
}

// foreignKeepalived is another VRRP deployment on this one's first router
// id: a plain keepalived sending unicast to the nodes, at the lowest
// priority so that it takes nothing.
func foreignKeepalived(nodes []*lab.Node) string {
	var peers strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&peers, "      %s\n", n.Addr4)
	}
	return fmt.Sprintf(`global_defs {
   router_id foreign
   script_user root
}
vrrp_instance foreign {
   interface eth0
   state MASTER
   virtual_router_id %d
   priority 1
   advert_int 1
   unicast_peer {
%s   }
   virtual_ipaddress {
      192.0.2.200 dev eth0
   }
}
`, firstVRID, peers.String())
}

// faults puts the fleet, whose holders are h, through what the dashboard
// shows, one after the other, each waited for.
func (r *run) faults(h lab.HolderMap) {
	c := r.c
	// A stopped service: its node's VIPs move, handed over.
	a := h[vips[0]]
	r.services[a].Stop()
	r.did("service stopped on " + a.Name)
	h = r.moved(vips[0], a)
	// Failing long enough for a scrape or two to see it.
	time.Sleep(2 * scrapeInterval)
	r.startService(a)
	r.shows(a, `^ipfailover_check_up 1$`)
	r.did("service back on " + a.Name)

	// SIGTERM: a handover, then the pod's new container.
	b := h[vips[1]]
	r.fatal("SIGTERM", r.procs[b].Signal(syscall.SIGTERM))
	r.did("SIGTERM to ipfailover on " + b.Name)
	h = r.moved(vips[1], b)
	if _, err := r.procs[b].Wait(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	r.start(b)
	r.ready(b)
	r.did("ipfailover back on " + b.Name)

	// A dead node: its VIPs move once its adverts stop, and the others
	// hear its heartbeats no more.
	dead := h[vips[2]]
	r.fatal("crash", dead.Crash())
	r.did(dead.Name + " dies")
	h = r.moved(vips[2], dead)
	peer := `peer="` + dead.Addr4.String() + `"`
	r.shows(r.other(dead), `^ipfailover_peer_heard\{`+peer+`\} 0$`)
	// Scraped silent at least twice.
	time.Sleep(2 * scrapeInterval)
	r.fatal("rejoin", dead.Rejoin(r.ctx))
	r.start(dead)
	r.ready(dead)
	r.did(dead.Name + " back")

	// keepalived killed: the entrypoint starts it again.
	k := h[vips[0]]
	ka, err := r.procs[k].Find("keepalived")
	r.fatal("finding keepalived", err)
	for _, p := range ka {
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	}
	r.did("keepalived killed on " + k.Name)
	r.shows(k, `^ipfailover_keepalived_restarts_total 1$`)
	r.ready(k)
	// Its node may take back what it prefers: wait for that too.
	h, err = c.WaitStable(r.ctx, vips, time.Second)
	r.fatal("holders after keepalived's restart", err)

	// A foreign speaker on the deployment's router id.
	out := lab.NewOutput(nil)
	r.outputs = append(r.outputs, namedOutput{"foreign keepalived on the client", out})
	fk, err := c.Client.StartKeepalived(r.ctx, foreignKeepalived(c.Nodes), out)
	r.fatal("starting a foreign keepalived", err)
	r.did("a foreign VRRP speaker starts")
	r.shows(c.Nodes[0], fmt.Sprintf(`^ipfailover_vrrp_foreign_adverts_total\{source=%q,vrid="%d"\} [3-9]`, c.Client.Addr4, firstVRID))
	_ = fk.Kill()
	r.did("the foreign speaker stops")

	// A stray VIP on a node that is not its master: removed.
	stray := r.other(h[vips[1]])
	_, err = stray.Exec(r.ctx, "ip", "addr", "add", vips[1].String()+"/32", "dev", lab.Link)
	r.fatal("adding a stray VIP", err)
	r.did(fmt.Sprintf("%s added on %s", vips[1], stray.Name))
	r.shows(stray, fmt.Sprintf(`^ipfailover_vip_stray_removed_total\{vip=%q\} 1$`, vips[1]))

	// Another host answers for a VIP, then stops: the holder announces it
	// again.
	holder := h[vips[2]]
	_, err = c.Client.Exec(r.ctx, "ip", "addr", "add", vips[2].String()+"/32", "dev", lab.Link)
	r.fatal("adding a VIP to the client", err)
	r.did(fmt.Sprintf("the client answers for %s", vips[2]))
	r.shows(holder, fmt.Sprintf(`^ipfailover_vip_duplicate\{mac="[0-9a-f:]+",vip=%q\} 1$`, vips[2]))
	time.Sleep(2 * scrapeInterval)
	_, err = c.Client.Exec(r.ctx, "ip", "addr", "del", vips[2].String()+"/32", "dev", lab.Link)
	r.fatal("removing the client's VIP", err)
	r.did(fmt.Sprintf("the client stops answering for %s", vips[2]))
	r.shows(holder, fmt.Sprintf(`^ipfailover_vip_announcements_total\{vip=%q\} [1-9]`, vips[2]))
}

// result is what one query of a panel returned.
type result struct {
	target target
	series []series
}

// grafanaVars are what Grafana puts for the dashboard's variables and its
// own, for a run from start to end: the namespace variable at "All".
func grafanaVars(start, end time.Time) *strings.Replacer {
	return strings.NewReplacer(
		"$__rate_interval", rateInterval.String(),
		"$__range", fmt.Sprintf("%ds", int(end.Sub(start).Seconds())),
	)
}

// checkQueries runs every query of d over the run and returns what each
// panel's queries returned, by title.
func (r *run) checkQueries(prom *promServer, d committedDashboard, start, end time.Time) map[string][]result {
	t := r.t
	ctx := r.ctx
	names, err := prom.names(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := regexp.MustCompile(`^label_values\((.+), *([a-z_]+)\)$`).FindStringSubmatch(v.Query)
		if q == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Query)
			continue
		}
		values, err := prom.labelValues(ctx, q[2], q[1], start, end)
		if err != nil || !slices.Contains(values, podNamespace) {
			t.Errorf("variable %s (%s): values %q (%v), want %s among them", v.Name, v.Query, values, err, podNamespace)
		}
	}
	vars := grafanaVars(start, end)
	all := strings.NewReplacer("$"+NamespaceVar, ".*")
	results := map[string][]result{}
	var missing []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s (%s)", p.Title, tg.RefID, tg.Expr)
			expr := vars.Replace(tg.Expr)
			sels, err := prom.selectors(ctx, expr)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			absent := false
			for _, s := range sels {
				if !names[s.name] {
					absent = true
					missing = append(missing, s.name)
					t.Errorf("%s: names %s, of which Prometheus stored no series from the nodes", where, s.name)
				}
				if !slices.Contains(s.matchers, `namespace=~"$namespace"`) {
					t.Errorf("%s: the selector of %s is not narrowed by the namespace variable (matchers %q)", where, s.name, s.matchers)
				}
			}
			if absent {
				continue
			}
			expr = all.Replace(expr)
			var ss []series
			if tg.Instant {
				ss, err = prom.query(ctx, expr, end)
			} else {
				ss, err = prom.queryRange(ctx, expr, start, end, scrapeInterval)
			}
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			drawn := slices.DeleteFunc(ss, func(s series) bool { return !s.finite() })
			if len(drawn) == 0 {
				t.Errorf("%s: returned nothing over the run", where)
				continue
			}
			// (Prometheus leaves out a label whose value is empty: a
			// legend's label must be on one series at least.)
			for _, m := range legendLabel.FindAllStringSubmatch(tg.Legend, -1) {
				if !slices.ContainsFunc(drawn, func(s series) bool { _, ok := s.Labels[m[1]]; return ok }) {
					t.Errorf("%s: the legend names %s, which no series has", where, m[1])
				}
			}
			results[p.Title] = append(results[p.Title], result{tg, drawn})
			t.Logf("%s: %d series", where, len(drawn))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Logf("missing from what the nodes served: %s", strings.Join(slices.Compact(missing), ", "))
	}
	return results
}
