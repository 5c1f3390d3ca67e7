package lab

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/wait"
)

func newCluster(t *testing.T) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("lab builds network namespaces: needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(ctx, Options{Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestPingAndClose(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		t.Skip("ping not installed")
	}
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, from := range append(c.Nodes, c.Client) {
		for _, to := range c.Nodes {
			if from == to {
				continue
			}
			for _, addr := range []netip.Addr{to.Addr4, to.Addr6} {
				if out, err := from.Exec(ctx, "ping", "-c1", "-W5", addr.String()); err != nil {
					t.Errorf("%s -> %s %s: %v\n%s", from.Name, to.Name, addr, err, out)
				}
			}
		}
	}
	route, err := c.Nodes[0].Exec(ctx, "ip", "route", "show", "default")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(route), "via 192.0.2.1 dev eth0") {
		t.Errorf("node1 default route = %q, want via 192.0.2.1 dev eth0", route)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	left, err := c.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("namespaces left after Close: %v", left)
	}
}

func TestStartIsAContainer(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := c.Nodes[1]

	out := NewOutput(nil)
	// PID 1 ignores signals it does not handle, so trap TERM; leave a
	// zombie behind (a child whose parent exits is reparented to PID 1,
	// which here never waits).
	script := `trap 'exit 7' TERM
echo pid=$$
grep -c ' /run tmpfs ' /proc/self/mounts
ip -o -4 addr show dev eth0
touch /run/marker /etc/keepalived/marker
while :; do sleep 0.1; done`
	p, err := n.Start(ctx, []string{"bash", "-c", script}, []string{"FOO=bar"}, out)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "marker in /run", func() bool {
		_, err := p.ReadFile("/run/marker")
		return err == nil
	})
	if got := out.String(); !strings.Contains(got, "pid=1\n") || !strings.Contains(got, "192.0.2.12/24") {
		t.Errorf("output = %q, want pid=1 and node2's address", got)
	}
	if _, err := os.Stat("/run/marker"); err == nil {
		t.Error("/run/marker leaked to the host")
	}
	if _, err := os.Stat("/etc/keepalived/marker"); err == nil {
		t.Error("/etc/keepalived/marker leaked to the host")
	}

	ps, err := p.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) == 0 || ps[0].Pid != p.Pid || ps[0].NSPid != 1 {
		t.Errorf("Procs = %+v, want the command first, with NSPid 1", ps)
	}
	if got, err := p.Exec(ctx, "cat", "/proc/1/comm"); err != nil || strings.TrimSpace(string(got)) != "bash" {
		t.Errorf("Exec in the namespaces: %q, %v; want bash", got, err)
	}

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(ctx)
	if err != nil || code != 7 {
		t.Errorf("Wait = %d, %v; want 7", code, err)
	}
}

func TestZombiesAreSeen(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The background sleep stays a child of PID 1, which becomes the
	// exec'd "sleep 60" that never waits: a zombie.
	p, err := c.Nodes[0].Start(ctx, []string{"sh", "-c", "sleep 0.2 & exec sleep 60"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a zombie", func() bool {
		z, err := p.Zombies()
		return err == nil && len(z) == 1
	})
	if err := c.Nodes[0].Crash(); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 128+9 {
		t.Errorf("after Crash, Wait = %d, %v; want 137", code, err)
	}
	if up, err := c.Nodes[0].Up(); err != nil || up {
		t.Errorf("after Crash, Up = %v, %v", up, err)
	}
	if has, err := c.Nodes[0].Has(c.Nodes[0].Addr6); err != nil || !has {
		t.Errorf("after Crash the IPv6 address should stay: %v, %v", has, err)
	}
	if err := c.Nodes[0].Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Client.Exec(ctx, "ping", "-c1", "-W5", c.Nodes[0].Addr6.String()); err != nil {
		t.Errorf("after Rejoin: %v\n%s", err, out)
	}
	if out, err := c.Nodes[0].Exec(ctx, "ping", "-c1", "-W5", Gateway4.String()); err != nil {
		t.Errorf("after Rejoin, default route: %v\n%s", err, out)
	}
}

const keepalivedConf = `global_defs {
    router_id lab_%[1]s
}
vrrp_instance lab_VIP_1 {
    interface eth0
    state BACKUP
    virtual_router_id 51
    priority %[2]d
    advert_int 1
    authentication {
        auth_type PASS
        auth_pass labtest
    }
    virtual_ipaddress {
        192.0.2.50 dev eth0
    }
}
`

func TestTwoKeepalivedOneMaster(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("keepalived not installed")
	}
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vip := netip.MustParseAddr("192.0.2.50")

	outs := map[*Node]*Output{}
	procs := map[*Node]*Process{}
	for i, n := range c.Nodes[:2] {
		env := []string{"CONF=" + fmt.Sprintf(keepalivedConf, n.Name, 100+10*i)}
		outs[n] = NewOutput(nil)
		p, err := n.Start(ctx, []string{"sh", "-c",
			`printf '%s' "$CONF" >/etc/keepalived/keepalived.conf && exec keepalived -n -l -D -f /etc/keepalived/keepalived.conf`},
			env, outs[n])
		if err != nil {
			t.Fatal(err)
		}
		procs[n] = p
	}
	// node2 (priority 110) may only preempt after node1 went MASTER first:
	// wait for the final state rather than the first one.
	if _, err := c.WaitOneHolder(ctx, []netip.Addr{vip}, func(m HolderMap) bool { return m[vip] == c.Nodes[1] }); err != nil {
		t.Fatalf("%v\nnode1:\n%s\nnode2:\n%s", err, outs[c.Nodes[0]], outs[c.Nodes[1]])
	}
	wait.For(t, "exactly one keepalived in MASTER state", func() bool {
		return lastState(outs[c.Nodes[0]].String()) == "BACKUP" && lastState(outs[c.Nodes[1]].String()) == "MASTER"
	})

	// The VIP answers from the client namespace through Dial.
	lp, err := c.Nodes[1].Start(ctx, []string{"python3", "-c", tcpServer, "192.0.2.50", "8080"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "a connection to the VIP from the client", func() bool {
		conn, err := c.Client.Dial(ctx, "tcp", "192.0.2.50:8080")
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	_ = lp.Kill()

	// Handover: keepalived's SIGTERM sends priority 0, node1 takes over.
	if err := procs[c.Nodes[1]].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := procs[c.Nodes[1]].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitOneHolder(ctx, []netip.Addr{vip}, func(m HolderMap) bool { return m[vip] == c.Nodes[0] }); err != nil {
		t.Fatal(err)
	}
}

// lastState returns the state of the last "Entering X STATE" line.
func lastState(log string) string {
	i := strings.LastIndex(log, "Entering ")
	if i < 0 {
		return ""
	}
	state, _, _ := strings.Cut(log[i+len("Entering "):], " ")
	return state
}

// tcpServer accepts and closes connections on argv[1]:argv[2].
const tcpServer = `import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
while True:
    s.accept()[0].close()
`

// TestProcessOutlivesItsStartersThread starts a node process from a
// goroutine locked to its thread, then ends the goroutine, which ends the
// thread (as the e2e test that holds a ptrace tracee does). The process
// must keep running: Pdeathsig follows the forking thread, not the process.
func TestProcessOutlivesItsStartersThread(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	started := make(chan *Process, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with this goroutine
		p, err := c.Nodes[0].Start(ctx, []string{"sleep", "60"}, nil, nil)
		if err != nil {
			t.Error(err)
		}
		started <- p
	}()
	p := <-started
	if p == nil {
		t.FailNow()
	}
	// The starter's thread is gone once the runtime has run its exit; give
	// a killed process time to be reported.
	select {
	case <-p.Done():
		code, _ := p.Wait(ctx)
		t.Fatalf("the node's process exited (code %d) when the thread that started it ended", code)
	case <-time.After(500 * time.Millisecond):
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 137 {
		t.Errorf("Wait after Kill = %d, %v; want 137", code, err)
	}
}

// TestForwardingIsExplicit: whatever the host's forwarding, the nodes
// forward exactly when Options.Routing says so, on IPv4 and IPv6, and the
// client and the bridge never do.
func TestForwardingIsExplicit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("lab builds network namespaces: needs root")
	}
	for _, routing := range []bool{false, true} {
		t.Run(fmt.Sprintf("routing=%v", routing), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := New(ctx, Options{Nodes: 2, Routing: routing})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			want := map[*Node]string{c.Client: "0"}
			for _, n := range c.Nodes {
				want[n] = map[bool]string{false: "0", true: "1"}[routing]
			}
			for n, w := range want {
				for _, key := range []string{"net.ipv4.ip_forward", "net.ipv4.conf.eth0.forwarding", "net.ipv6.conf.all.forwarding", "net.ipv6.conf.eth0.forwarding"} {
					out, err := n.Exec(ctx, "sysctl", "-n", key)
					if err != nil {
						t.Fatal(err)
					}
					if got := strings.TrimSpace(string(out)); got != w {
						t.Errorf("%s: %s = %s, want %s", n.Name, key, got, w)
					}
				}
			}
			out, err := c.BridgeExec(ctx, "sysctl", "-n", "net.ipv4.ip_forward")
			if err != nil || strings.TrimSpace(string(out)) != "0" {
				t.Errorf("bridge: net.ipv4.ip_forward = %q, %v; want 0", out, err)
			}
		})
	}
}

// TestCutVRRP sends VRRP packets (IP protocol 112, IPv4 and IPv6) between
// two nodes while one node's VRRP is cut in the bridge, one direction, both,
// then healed one direction at a time: exactly the cut directions lose
// them, and other traffic (ping) flows all along.
func TestCutVRRP(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := c.Nodes[0], c.Nodes[1]
	type sock struct {
		n  *Node
		v6 bool
		pc net.PacketConn
	}
	var socks []sock
	for _, n := range []*Node{a, b} {
		for _, v6 := range []bool{false, true} {
			network, addr := "ip4:112", n.Addr4.String()
			if v6 {
				network, addr = "ip6:112", n.Addr6.String()
			}
			var pc net.PacketConn
			if err := InNetns(n.Netns, func() error {
				var err error
				pc, err = net.ListenPacket(network, addr)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close() })
			socks = append(socks, sock{n, v6, pc})
		}
	}
	find := func(n *Node, v6 bool) sock {
		for _, s := range socks {
			if s.n == n && s.v6 == v6 {
				return s
			}
		}
		panic("no socket")
	}
	// passes sends one packet from -> to of each family and reports
	// whether both arrived.
	passes := func(from, to *Node) bool {
		t.Helper()
		arrived := true
		for _, v6 := range []bool{false, true} {
			dst := &net.IPAddr{IP: to.Addr4.AsSlice()}
			if v6 {
				dst = &net.IPAddr{IP: to.Addr6.AsSlice()}
			}
			payload := []byte(fmt.Sprintf("%s->%s %d", from.Name, to.Name, time.Now().UnixNano()))
			if _, err := find(from, v6).pc.WriteTo(payload, dst); err != nil {
				t.Fatalf("sending from %s: %v", from.Name, err)
			}
			rx := find(to, v6).pc
			got := false
			buf := make([]byte, 1500)
			_ = rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			for !got {
				n, _, err := rx.ReadFrom(buf)
				if err != nil {
					break
				}
				// An IPv4 raw socket reads the IP header too.
				got = strings.HasSuffix(string(buf[:n]), string(payload))
			}
			arrived = arrived && got
		}
		return arrived
	}
	check := func(state string, aToB, bToA bool) {
		t.Helper()
		if got := passes(a, b); got != aToB {
			t.Errorf("%s: %s -> %s VRRP passes = %v, want %v", state, a.Name, b.Name, got, aToB)
		}
		if got := passes(b, a); got != bToA {
			t.Errorf("%s: %s -> %s VRRP passes = %v, want %v", state, b.Name, a.Name, got, bToA)
		}
		if out, err := b.Exec(ctx, "ping", "-c1", "-W5", a.Addr4.String()); err != nil {
			t.Errorf("%s: ping %s -> %s: %v\n%s", state, b.Name, a.Name, err, out)
		}
	}
	check("before", true, true)
	if err := a.CutVRRP(ctx, ToNode); err != nil {
		t.Fatal(err)
	}
	check("cut to node1", true, false)
	if err := a.CutVRRP(ctx, FromNode); err != nil {
		t.Fatal(err)
	}
	check("cut both ways", false, false)
	if err := a.HealVRRP(ctx, ToNode); err != nil {
		t.Fatal(err)
	}
	check("healed to node1", false, true)
	if err := a.HealVRRP(ctx, FromNode); err != nil {
		t.Fatal(err)
	}
	check("healed", true, true)
	if err := a.CutVRRP(ctx, BothWays); err != nil {
		t.Fatal(err)
	}
	check("cut both ways at once", false, false)
	if err := a.HealVRRP(ctx, BothWays); err != nil {
		t.Fatal(err)
	}
	check("healed at once", true, true)
}

// TestTCPProbe connects from the client to a node's listener that goes
// away for 300 ms: the probe sees an outage about that long, the target
// reachable again afterwards, and a port nobody listens on never
// reachable.
func TestTCPProbe(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := c.Nodes[0]
	listen := func() net.Listener {
		var ln net.Listener
		if err := InNetns(n.Netns, func() error {
			var err error
			ln, err = net.Listen("tcp", netip.AddrPortFrom(n.Addr4, 9000).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.Close()
			}
		}()
		return ln
	}
	ln := listen()
	targets := []netip.AddrPort{netip.AddrPortFrom(n.Addr4, 9000), netip.AddrPortFrom(n.Addr6, 9001)}
	p, err := c.ProbeTCP(targets, 10*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	wait.For(t, "the listener reachable", func() bool { _, ok := p.Reachable(0); return ok })
	ln.Close()
	gone := time.Now()
	time.Sleep(300 * time.Millisecond)
	ln = listen()
	defer ln.Close()
	if err := p.WaitSteady(ctx, 200*time.Millisecond, time.Second); err == nil {
		t.Error("WaitSteady passed with a target nobody listens on")
	}
	if _, ok := p.Reachable(0); !ok {
		t.Error("the listener is back, the probe does not reach it")
	}
	if _, ok := p.Reachable(1); ok {
		t.Error("a port nobody listens on is reachable")
	}
	out := p.Outage(0, gone)
	t.Logf("outage of a listener closed for 300 ms: %v", out)
	if out < 250*time.Millisecond || out > time.Second {
		t.Errorf("outage %v, want about 300 ms", out)
	}
}

func TestImpairDelaysAndLoses(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		t.Skip("ping not installed")
	}
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := c.Nodes[0]
	rtt := func(addr netip.Addr) time.Duration {
		t.Helper()
		t0 := time.Now()
		if out, err := c.Client.Exec(ctx, "ping", "-c1", "-W5", addr.String()); err != nil {
			t.Fatalf("ping %s: %v\n%s", addr, err, out)
		}
		return time.Since(t0)
	}
	rtt(n.Addr4) // resolve the neighbour first

	imp, err := c.Impair(ctx, Impairment{Delay: 40 * time.Millisecond, Jitter: 10 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Request and reply each cross the bridge once: at least 2 × 30 ms.
	for _, addr := range []netip.Addr{n.Addr4, n.Addr6} {
		if got := rtt(addr); got < 60*time.Millisecond {
			t.Errorf("ping %s through the delayed segment took %s, want at least 60 ms", addr, got)
		}
	}
	if imp.Delayed() < 4 {
		t.Errorf("the queue delayed %d packets, want at least 4", imp.Delayed())
	}
	if err := imp.Restore(ctx); err != nil {
		t.Fatal(err)
	}

	imp, err = c.Impair(ctx, Impairment{Loss: 1})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.Client.Exec(ctx, "ping", "-c1", "-W1", n.Addr4.String()); err == nil {
		t.Errorf("ping went through a segment that loses every frame:\n%s", out)
	}
	if err := imp.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	rtt(n.Addr4)
	out, err := c.BridgeExec(ctx, "nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("the bridge keeps rules after Restore:\n%s", out)
	}
}

func TestFaults(t *testing.T) {
	if _, err := exec.LookPath("ping"); err != nil {
		t.Skip("ping not installed")
	}
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ping := func(from, to *Node) error {
		_, err := from.Exec(ctx, "ping", "-c1", "-W1", to.Addr4.String())
		return err
	}

	// A cut link: nothing reaches the node, and it comes back.
	if err := n1.CutLink(ctx); err != nil {
		t.Fatal(err)
	}
	if ping(c.Client, n1) == nil {
		t.Error("the client reached node1 through a cut link")
	}
	if err := n1.RestoreLink(ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "node1 reachable again", func() bool { return ping(c.Client, n1) == nil })

	// Freeze, thaw and kill every process of a node.
	p, err := n2.Start(ctx, []string{"sleep", "600"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Freeze(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "sleep stopped", func() bool { return procState(t, p) == "T" })
	if err := n2.Thaw(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "sleep running", func() bool { return procState(t, p) == "S" })
	n2.KillAll()
	if !p.Exited() {
		t.Error("KillAll returned with the process still running")
	}

	// One direction of a VRRP partition: only VRRP from the peer's MAC.
	if err := n1.DropVRRPFrom(ctx, n2); err != nil {
		t.Fatal(err)
	}
	tables, err := n1.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "inet lab_drop_vrrp_from_node2"; !slices.Contains(tables, want) {
		t.Errorf("node1's tables = %v, want %s", tables, want)
	}
	if err := ping(n2, n1); err != nil {
		t.Errorf("ping from node2 to node1 with only VRRP dropped: %v", err)
	}
	if err := n1.AllowVRRPFrom(ctx, n2); err != nil {
		t.Fatal(err)
	}
	if tables, err := n1.Tables(ctx); err != nil || len(tables) != 0 {
		t.Errorf("node1's tables after AllowVRRPFrom = %v, %v; want none", tables, err)
	}
}

func procState(t *testing.T, p *Process) string {
	t.Helper()
	ps, err := p.Procs()
	if err != nil || len(ps) == 0 {
		t.Fatalf("listing the processes of pid %d: %v", p.Pid, err)
	}
	return ps[0].State
}

func TestParseNeighbours(t *testing.T) {
	out := `192.0.2.12 lladdr a2:5f:36:fc:a1:93 REACHABLE 
192.0.2.102 lladdr 5e:1b:5c:f0:04:0f DELAY 
192.0.2.7 FAILED 
2001:db8::101 lladdr a2:5f:36:fc:a1:93 router STALE 
`
	got := parseNeighbours(out)
	want := map[netip.Addr]string{
		netip.MustParseAddr("192.0.2.12"):    "a2:5f:36:fc:a1:93",
		netip.MustParseAddr("192.0.2.102"):   "5e:1b:5c:f0:04:0f",
		netip.MustParseAddr("192.0.2.7"):     "",
		netip.MustParseAddr("2001:db8::101"): "a2:5f:36:fc:a1:93",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for a, mac := range want {
		if m, ok := got[a]; !ok || m != mac {
			t.Errorf("%s: got %q (listed %v), want %q", a, m, ok, mac)
		}
	}
}

// TestAddressStorm: a storm leaves the node's addresses as they were, its
// ip runs in the group it is given, and one whose adding fails (an address
// of its range already there) removes what it added.
func TestAddressStorm(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := c.Nodes[0]
	before, err := n.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	g := testCPUGroup(t, "ipfailover-lab-test-"+c.Name, "storm", 1000)
	// Watch the group while the storm runs: its ip must be seen there.
	stormed, seen := make(chan struct{}), make(chan bool)
	go func() {
		found := false
		for {
			select {
			case <-stormed:
				seen <- found
				return
			case <-time.After(time.Millisecond):
			}
			if found {
				continue
			}
			data, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
			for _, pid := range strings.Fields(string(data)) {
				comm, _ := os.ReadFile("/proc/" + pid + "/comm")
				found = found || strings.TrimSpace(string(comm)) == "ip"
			}
		}
	}()
	serr := n.AddressStorm(ctx, 6000, g)
	close(stormed)
	if !<-seen {
		t.Errorf("no ip process was seen in %s during the storm", g.Path)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	after, err := n.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("addresses after the storm %v, want %v", after, before)
	}

	if _, err := n.Exec(ctx, "ip", "addr", "add", "198.18.3.0/32", "dev", Link); err != nil {
		t.Fatal(err)
	}
	if err := n.AddressStorm(ctx, 2000, nil); err == nil {
		t.Error("a storm over an address of its range succeeded")
	}
	if after, err := n.Addrs(); err != nil || !slices.Equal(before, after) {
		t.Errorf("addresses after the failed storm %v (%v), want %v", after, err, before)
	}
	for _, count := range []int{0, StormMax + 1} {
		if err := n.AddressStorm(ctx, count, nil); err == nil {
			t.Errorf("a storm of %d succeeded", count)
		}
	}
}
