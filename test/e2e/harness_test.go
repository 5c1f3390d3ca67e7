package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

const (
	// scenarioTimeout bounds one scenario; conditions are polled until it.
	scenarioTimeout = 2 * time.Minute
	// monitorPort is where each node's httpd listens: the monitored port.
	monitorPort = 8080
	// settle is how long holders must stay put before a scenario acts on
	// them: three advert intervals, startup preemption is over by then.
	settle = 3 * time.Second
)

// The VIPs of the scenarios, as the variable writes them and as addresses.
const (
	vips4Env = "192.0.2.100-102"
	vips6Env = "2001:db8::100-101"
)

var (
	vips4 = addrs("192.0.2.100", "192.0.2.101", "192.0.2.102")
	vips6 = addrs("2001:db8::100", "2001:db8::101")
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// scenario is one test's cluster with an httpd on every node.
type scenario struct {
	t     *testing.T
	ctx   context.Context
	c     *lab.Cluster
	httpd map[*lab.Node]*lab.Process

	mu      sync.Mutex
	outputs []namedOutput
}

type namedOutput struct {
	name string
	out  *lab.Output
}

// newScenario builds a 3-node cluster on which each node serves its name
// over HTTP on monitorPort. The cluster goes away in t.Cleanup; if the test
// failed, every process's output is logged first.
func newScenario(t *testing.T) *scenario {
	t.Helper()
	return newScenarioOf(t, 3)
}

// newScenarioOf is newScenario with the given number of nodes.
func newScenarioOf(t *testing.T, nodes int) *scenario {
	t.Helper()
	return newScenarioWith(t, lab.Options{Nodes: nodes}, scenarioTimeout)
}

// newScenarioWith is newScenario on a cluster built with opts (its Logger
// is the test's), bounded by timeout.
func newScenarioWith(t *testing.T, opts lab.Options, timeout time.Duration) *scenario {
	t.Helper()
	needRoot(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := lab.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, ctx: ctx, c: c, httpd: map[*lab.Node]*lab.Process{}}
	t.Cleanup(func() {
		// IPFAILOVER_E2E_LOGS=1 keeps the process outputs of passing tests too.
		if t.Failed() || os.Getenv("IPFAILOVER_E2E_LOGS") != "" {
			s.dump()
		}
		if err := c.Close(); err != nil {
			t.Errorf("closing the cluster: %v", err)
		}
		if left, err := c.Leftovers(); err != nil || len(left) > 0 {
			t.Errorf("namespaces left behind: %v %v", left, err)
		}
	})
	for _, n := range c.Nodes {
		s.startHTTPD(n)
	}
	for _, n := range c.Nodes {
		url := fmt.Sprintf("http://%s:%d/", n.Addr4, monitorPort)
		s.waitFor("httpd on "+n.Name, func() (bool, error) {
			body, err := c.Get(ctx, url)
			return err == nil && strings.TrimSpace(body) == n.Name, nil
		})
	}
	return s
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *scenario) output(name string) *lab.Output {
	out := lab.NewOutput(nil)
	s.mu.Lock()
	s.outputs = append(s.outputs, namedOutput{name, out})
	s.mu.Unlock()
	return out
}

// dump logs every process's output in full, each under a header that
// names the process and the file it was also written to: a failure must
// explain itself from the test's log alone (CI and a fresh machine keep
// only that; a node's log cut to its tail lost the lines of the moment
// that mattered). The test's own errors are printed before the
// outputs by go test; .ci/run gathers them again at the end.
func (s *scenario) dump() {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir, err := os.MkdirTemp("", "ipfailover-e2e-"+strings.ReplaceAll(s.t.Name(), "/", "_")+"-")
	if err != nil {
		s.t.Logf("no directory for the process outputs: %v", err)
	}
	for i, o := range s.outputs {
		text := o.out.String()
		if text == "" {
			s.t.Logf("----- no output from %s -----", o.name)
			continue
		}
		lines := strings.Count(strings.TrimRight(text, "\n"), "\n") + 1
		where := ""
		if dir != "" {
			path := filepath.Join(dir, fmt.Sprintf("%02d-%s.log", i, strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(o.name)))
			if err := os.WriteFile(path, []byte(text), 0o644); err == nil {
				where = ", also in " + path
			}
		}
		s.t.Logf("----- output of %s (all %d lines%s) -----\n%s\n----- end of %s -----", o.name, lines, where, strings.TrimRight(text, "\n"), o.name)
	}
	for _, n := range s.c.Nodes {
		a, _ := n.Addrs()
		s.t.Logf("%s addresses: %v", n.Name, a)
	}
}

func (s *scenario) startHTTPD(n *lab.Node) {
	s.t.Helper()
	p, err := n.Start(s.ctx, []string{httpdBin, "-listen", fmt.Sprintf(":%d", monitorPort), "-name", n.Name}, nil, s.output("httpd "+n.Name))
	if err != nil {
		s.t.Fatal(err)
	}
	s.httpd[n] = p
}

// env is the environment of every ipfailover: the VIPs, the monitored
// port, then extra (later entries win).
func env(vips string, extra ...string) []string {
	return append([]string{
		"OPENSHIFT_HA_VIRTUAL_IPS=" + vips,
		"OPENSHIFT_HA_MONITOR_PORT=" + strconv.Itoa(monitorPort),
	}, extra...)
}

// fleet starts ipfailover run on nodes (nil: all) and waits for one holder
// per VIP.
func (s *scenario) fleet(environ []string, vips []netip.Addr, nodes ...*lab.Node) *lab.Fleet {
	s.t.Helper()
	f, err := s.c.StartAll(s.ctx, lab.StartOptions{
		Argv:  []string{ipfailoverBin, "run"},
		Env:   environ,
		VIPs:  vips,
		Nodes: nodes,
		Quiet: settle,
	})
	if err != nil {
		s.t.Fatalf("starting ipfailover: %v", err)
	}
	for i, p := range f.Procs {
		s.mu.Lock()
		s.outputs = append(s.outputs, namedOutput{"ipfailover " + p.Node().Name + " (first)", f.Outputs[i]})
		s.mu.Unlock()
	}
	s.t.Logf("converged: %s", f.Holders)
	return f
}

// start starts ipfailover run on one node.
func (s *scenario) start(n *lab.Node, environ []string) (*lab.Process, *lab.Output) {
	s.t.Helper()
	out := s.output("ipfailover " + n.Name + " (restart)")
	p, err := n.Start(s.ctx, []string{ipfailoverBin, "run"}, environ, out)
	if err != nil {
		s.t.Fatal(err)
	}
	return p, out
}

// waitOne waits for one holder per VIP that cond (nil: any) accepts.
func (s *scenario) waitOne(vips []netip.Addr, cond func(lab.HolderMap) bool) lab.HolderMap {
	s.t.Helper()
	m, err := s.c.WaitOneHolder(s.ctx, vips, cond)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// waitFor polls cond until it holds; an error from cond is fatal.
func (s *scenario) waitFor(what string, cond func() (bool, error)) {
	s.t.Helper()
	for {
		ok, err := cond()
		if err != nil {
			s.t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-s.ctx.Done():
			s.t.Fatalf("waiting for %s: %v", what, s.ctx.Err())
		case <-time.After(lab.PollInterval):
		}
	}
}

// stop sends SIGTERM and requires exit code 0.
func (s *scenario) stop(p *lab.Process) {
	s.t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("SIGTERM to %s: %v", p.Node().Name, err)
	}
	code, err := p.Wait(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	if code != 0 {
		s.t.Errorf("ipfailover on %s exited %d after SIGTERM, want 0", p.Node().Name, code)
	}
}

// held returns the VIPs among vips that are on n's eth0.
func held(t *testing.T, n *lab.Node, vips []netip.Addr) []netip.Addr {
	t.Helper()
	as, err := n.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, v := range vips {
		if slices.ContainsFunc(as, func(p netip.Prefix) bool { return p.Addr() == v }) {
			out = append(out, v)
		}
	}
	return out
}

// keepaliveds returns the keepalived processes in n's network namespace.
func keepaliveds(t *testing.T, n *lab.Node) []lab.Proc {
	t.Helper()
	ps, err := n.Procs()
	if err != nil {
		t.Fatal(err)
	}
	var out []lab.Proc
	for _, p := range ps {
		if p.Comm == "keepalived" {
			out = append(out, p)
		}
	}
	return out
}

// others returns the nodes of c other than n.
func others(c *lab.Cluster, n *lab.Node) []*lab.Node {
	var out []*lab.Node
	for _, m := range c.Nodes {
		if m != n {
			out = append(out, m)
		}
	}
	return out
}

// inputRules returns the lines of "iptables -S INPUT" (or ip6tables) in n
// that mention match.
func inputRules(ctx context.Context, t *testing.T, n *lab.Node, cmd, match string) []string {
	t.Helper()
	out, err := n.Exec(ctx, cmd, "-w", "-S", "INPUT")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, match) {
			found = append(found, line)
		}
	}
	return found
}
