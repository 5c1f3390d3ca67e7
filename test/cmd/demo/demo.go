package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// settings are the OPENSHIFT_HA_* variables of every node, with what each
// one is for.
var settings = [][2]string{
	{"OPENSHIFT_HA_CONFIG_NAME=demo", "names the VRRP instances demo_VIP_1..3"},
	{"OPENSHIFT_HA_VIRTUAL_IPS=192.0.2.100-102", "three VIPs, one VRRP instance each"},
	{"OPENSHIFT_HA_MONITOR_PORT=8080", "ipfailover checks the web service with a TCP connect"},
	{"OPENSHIFT_HA_REPLICA_COUNT=3", "three pods: spreads the preferred nodes"},
	{"OPENSHIFT_HA_IPTABLES_CHAIN=INPUT", "accept VRRP (224.0.0.18) in the node's firewall"},
}

const servicePort = 8080

// demo holds what the steps share.
type demo struct {
	out     io.Writer
	verbose bool
	streamu sync.Mutex

	logDir, binDir   string
	ipfailover, self string

	c    *lab.Cluster
	vips []netip.Addr
	env  []string

	// ipf and svc are each node's ipfailover and web service.
	ipf, svc map[*lab.Node]*lab.Process
	logs     []*os.File

	// conf is each node's keepalived.conf, as ipfailover wrote it.
	conf map[*lab.Node]nodeConf
	// home is who held each VIP once the cluster first settled.
	home map[netip.Addr]*lab.Node
	// explained is set once the demo said why a VIP comes back.
	explained bool
	// rolled is the node whose pod step 4 stopped.
	rolled *lab.Node
	// stopped are the processes the demo stopped on purpose.
	stopped map[*lab.Process]bool
	// restarted is ipfailover_keepalived_restarts_total of the nodes
	// where it was not 0: keepalived died and was restarted.
	restarted map[*lab.Node]string
	// polls and polling count the kernel reads of the timings.
	polls   int
	polling time.Duration

	// Timings for the summary.
	summary []string
}

func run(ctx context.Context, out io.Writer, verbose bool) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the demo builds network namespaces and runs keepalived: run it as root")
	}
	for _, tool := range []string{"keepalived", "iptables", "nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed: run ./scripts/install-deps.sh", tool)
		}
	}
	d := &demo{
		out:     out,
		verbose: verbose,
		vips:    []netip.Addr{netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101"), netip.MustParseAddr("192.0.2.102")},
		ipf:     map[*lab.Node]*lab.Process{},
		svc:     map[*lab.Node]*lab.Process{},
		conf:    map[*lab.Node]nodeConf{},
		home:    map[netip.Addr]*lab.Node{},

		restarted: map[*lab.Node]string{},
		stopped:   map[*lab.Process]bool{},
	}
	for _, s := range settings {
		d.env = append(d.env, s[0])
	}
	// A node's /tmp is a private tmpfs, so the binaries live in /var/tmp,
	// which the nodes see. The logs stay after the demo, in the host's /tmp.
	if d.binDir, err = os.MkdirTemp("/var/tmp", "ipfailover-demo-"); err != nil {
		return err
	}
	defer os.RemoveAll(d.binDir)
	if d.logDir, err = os.MkdirTemp("", "ipfailover-demo-logs-"); err != nil {
		return err
	}
	defer func() {
		for _, f := range d.logs {
			f.Close()
		}
		fmt.Fprintf(out, "\nEvery node's full output (ipfailover with keepalived, and the web service): %s\n", d.logDir)
	}()

	d.head("1. Three nodes, each running ipfailover")
	if err := d.build(ctx); err != nil {
		return err
	}
	var labLog *slog.Logger
	if verbose {
		labLog = slog.New(slog.NewTextHandler(d.stream("lab"), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d.c, err = lab.New(ctx, lab.Options{Nodes: 3, Logger: labLog})
	if err != nil {
		return fmt.Errorf("building the lab: %w", err)
	}
	defer func() { err = errors.Join(err, d.cleanup()) }()

	steps := []func(context.Context) error{d.start, d.show, d.serviceFails, d.rollPod, d.rejoin, d.splitBrain, d.partitionHeals}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	for n, count := range d.restarted {
		return fmt.Errorf("keepalived died and was restarted on %s (ipfailover_keepalived_restarts_total %s): see \"keepalived died\" in %s",
			n.Name, count, filepath.Join(d.logDir, n.Name+"-ipfailover.log"))
	}
	d.head("Summary")
	for _, s := range d.summary {
		d.say("  %s", s)
	}
	d.say("How: each time runs from the demo's action (kill, SIGTERM, start). VIP moves end at the first")
	d.say("read of the kernel that showed the VIP on its new node: the demo lists eth0's addresses in every")
	d.say("node's namespace over netlink, a new read every %s on average (%d reads), so they are", avg(d.polling, d.polls), d.polls)
	d.say("accurate to that. The exit is the reaping of the process; states are keepalived_vrrp_state")
	d.say("scraped from the node's :9650/metrics every 20 ms.")
	return nil
}

func (d *demo) head(title string) { fmt.Fprintf(d.out, "\n== %s ==\n", title) }

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

// build compiles ./cmd/ipfailover and copies this program, which serves
// the nodes' web service, next to it.
func (d *demo) build(ctx context.Context) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	gomod, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("finding the module root (go env GOMOD): %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return errors.New("run the demo from inside the ipfailover repository (go env GOMOD is empty)")
	}
	root := filepath.Dir(mod)
	d.ipfailover = filepath.Join(d.binDir, "ipfailover")
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", d.ipfailover, "./cmd/ipfailover")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/ipfailover: %w\n%s", err, out)
	}
	d.say("Built the real entrypoint: go build ./cmd/ipfailover (%s).", ms(time.Since(start)))

	self, err := os.Executable()
	if err != nil {
		return err
	}
	d.self = filepath.Join(d.binDir, "demo")
	return copyFile(self, d.self)
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	return dst.Close()
}

func (d *demo) startService(ctx context.Context, n *lab.Node) error {
	w, err := d.logFile(n, "web")
	if err != nil {
		return err
	}
	p, err := n.Start(ctx, []string{d.self, "serve", "-listen", fmt.Sprintf(":%d", servicePort), "-name", n.Name}, nil, w)
	if err != nil {
		return err
	}
	d.svc[n] = p
	return nil
}

func (d *demo) waitService(ctx context.Context, n *lab.Node) error {
	url := fmt.Sprintf("http://%s:%d/", n.Addr4, servicePort)
	deadline := time.Now().Add(20 * time.Second)
	for {
		body, err := get(ctx, d.c, url)
		if err == nil && body == n.Name {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s's web service does not answer at %s: %v", n.Name, url, errors.Join(err, ctx.Err()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *demo) startIPFailover(ctx context.Context, n *lab.Node) error {
	w, err := d.logFile(n, "ipfailover")
	if err != nil {
		return err
	}
	p, err := n.Start(ctx, []string{d.ipfailover, "run"}, d.env, w)
	if err != nil {
		return err
	}
	d.ipf[n] = p
	return nil
}

// logFile returns the writer of one program's output on n: a file in the
// log directory (appended to across restarts), streamed with -v.
func (d *demo) logFile(n *lab.Node, what string) (io.Writer, error) {
	f, err := os.OpenFile(filepath.Join(d.logDir, n.Name+"-"+what+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	d.logs = append(d.logs, f)
	fmt.Fprintf(f, "--- %s started by the demo at %s ---\n", what, time.Now().Format(time.StampMilli))
	if !d.verbose {
		return f, nil
	}
	return io.MultiWriter(f, d.stream(n.Name+" "+what)), nil
}

// stream returns a writer that copies whole lines to the demo's output,
// each prefixed with name.
func (d *demo) stream(name string) io.Writer {
	return lab.PrefixWriter(d.out, &d.streamu, "    | "+name+": ")
}

// cleanup stops everything and removes the lab, then checks that nothing
// is left: no namespace of the lab, no process the demo started.
func (d *demo) cleanup() error {
	d.head("Cleaning up")
	var procs []*lab.Process
	for _, n := range d.c.Nodes {
		procs = append(procs, n.Running()...)
	}
	if err := d.c.Close(); err != nil {
		return fmt.Errorf("removing the lab: %w", err)
	}
	left, err := d.c.Leftovers()
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("namespaces left after cleanup: %s", strings.Join(left, " "))
	}
	for _, p := range procs {
		if !p.Exited() {
			return fmt.Errorf("pid %d (%s) still runs after cleanup", p.Pid, p.Argv[0])
		}
	}
	d.say("Stopped the %d running programs (and their keepalived) and removed the namespaces %s%s-*;", len(procs), lab.NetnsPrefix, d.c.Name)
	d.say("none is left.")
	return nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func nodeNames(ns []*lab.Node) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return strings.Join(s, ", ")
}

func addrList(vs []netip.Addr) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.String())
	}
	return strings.Join(s, ", ")
}
