package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillAll kills every process started on the node at once, as a node whose
// kubelet, container runtime and containers all die: each is stopped
// before any is killed, so none says goodbye. The node's kernel, link and
// addresses stay (VIPs included): its kernel still answers ARP for them.
func (n *Node) KillAll() {
	n.killAll()
	n.cluster.log.Info("killed every process", "node", n.Name)
}

// Freeze stops (SIGSTOP) every process started on the node, as a paused
// virtual machine's: they hold their state and resume with it after Thaw.
// The node's kernel goes on answering for its addresses.
func (n *Node) Freeze() error {
	if err := n.signalEvery(syscall.SIGSTOP); err != nil {
		return err
	}
	n.cluster.log.Info("frozen", "node", n.Name)
	return nil
}

// Thaw resumes (SIGCONT) what Freeze stopped.
func (n *Node) Thaw() error {
	if err := n.signalEvery(syscall.SIGCONT); err != nil {
		return err
	}
	n.cluster.log.Info("thawed", "node", n.Name)
	return nil
}

// signalEvery sends sig to every process of the PID namespaces of the
// node's running processes.
func (n *Node) signalEvery(sig syscall.Signal) error {
	for _, p := range n.Running() {
		ps, err := p.Procs()
		if err != nil {
			if p.Exited() {
				continue
			}
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		for _, q := range ps {
			if err := syscall.Kill(q.Pid, sig); err != nil && err != syscall.ESRCH {
				return fmt.Errorf("%s: %s to pid %d: %w", n.Name, sig, q.Pid, err)
			}
		}
	}
	return nil
}

// CutLink sets the bridge's port of the node down: the cable pulled at the
// switch. The node's eth0 loses its carrier (keepalived sees the interface
// fail), nothing reaches the node and nothing leaves it. RestoreLink plugs
// it back in.
func (n *Node) CutLink(ctx context.Context) error {
	if err := run(ctx, []string{"ip", "-n", n.cluster.bridgeNetns, "link", "set", n.port, "down"}); err != nil {
		return err
	}
	n.cluster.log.Info("link cut", "node", n.Name)
	return nil
}

// RestoreLink undoes CutLink.
func (n *Node) RestoreLink(ctx context.Context) error {
	if err := run(ctx, []string{"ip", "-n", n.cluster.bridgeNetns, "link", "set", n.port, "up"}); err != nil {
		return err
	}
	n.cluster.log.Info("link restored", "node", n.Name)
	return nil
}

// dropTable is the nftables table DropVRRPFrom adds in a node for peer.
func dropTable(peer *Node) string { return "lab_drop_vrrp_from_" + peer.Name }

// DropVRRPFrom makes the node drop every VRRP packet (IPv4 and IPv6) that
// comes from peer's MAC: one direction of a VRRP partition between the
// two. Everything else still flows. AllowVRRPFrom undoes it.
func (n *Node) DropVRRPFrom(ctx context.Context, peer *Node) error {
	mac, err := peer.MAC()
	if err != nil {
		return err
	}
	table := dropTable(peer)
	for _, argv := range [][]string{
		{"nft", "add", "table", "inet", table},
		{"nft", "add", "chain", "inet", table, "input", "{ type filter hook input priority -300 ; }"},
		{"nft", "add", "rule", "inet", table, "input", "ether", "saddr", mac.String(), "meta", "l4proto", "vrrp", "drop"},
	} {
		if _, err := n.Exec(ctx, argv...); err != nil {
			return err
		}
	}
	n.cluster.log.Info("VRRP dropped", "node", n.Name, "from", peer.Name)
	return nil
}

// AllowVRRPFrom removes DropVRRPFrom's table.
func (n *Node) AllowVRRPFrom(ctx context.Context, peer *Node) error {
	if _, err := n.Exec(ctx, "nft", "delete", "table", "inet", dropTable(peer)); err != nil {
		return err
	}
	n.cluster.log.Info("VRRP allowed", "node", n.Name, "from", peer.Name)
	return nil
}

// Tables lists the nftables tables of the node's network namespace, as
// "family name" ("inet keepalived"); iptables' own tables included.
func (n *Node) Tables(ctx context.Context) ([]string, error) {
	out, err := n.Exec(ctx, "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	return parseTables(string(out)), nil
}

// BridgeTables is Tables for the bridge's namespace.
func (c *Cluster) BridgeTables(ctx context.Context) ([]string, error) {
	out, err := c.BridgeExec(ctx, "nft", "list", "tables")
	if err != nil {
		return nil, err
	}
	return parseTables(string(out)), nil
}

func parseTables(list string) []string {
	var tables []string
	for line := range strings.SplitSeq(list, "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
			tables = append(tables, t)
		}
	}
	return tables
}

// stormBase is the first address AddressStorm adds: the benchmarking range
// (198.18.0.0/15), which no lab address, VIP or route uses.
var stormBase = netip.MustParseAddr("198.18.0.0")

// StormMax is the most addresses AddressStorm adds at once: the size of
// the benchmarking range.
const StormMax = 1 << 17

// StormAddrs is the size of the storms the tests and the nemesis make:
// a busy node's burst, whose notifications overflow a listener's default
// socket buffer many times over.
const StormAddrs = 6000

// AddressStorm adds count /32 addresses to the node's eth0 and removes them
// again, each set in one `ip -batch` run: 2×count address notifications
// for every listener in the node's network namespace, more than a stopped
// listener's socket can queue. The removal runs even when ctx ended
// meanwhile, and after a failed adding removes what is there, so nothing
// is left behind. With g, each `ip` runs in that cgroup from before its
// first command: the kernel's work of adding and removing the addresses,
// a second of a core, is charged to the node's own load, not to the
// caller's (the lab's harness runs with the largest share).
func (n *Node) AddressStorm(ctx context.Context, count int, g *CPUGroup) error {
	if count < 1 || count > StormMax {
		return fmt.Errorf("lab: an address storm of %d: must be 1..%d", count, StormMax)
	}
	batch := func(verb string) string {
		var b strings.Builder
		a := stormBase
		for range count {
			fmt.Fprintf(&b, "address %s %s/32 dev %s\n", verb, a, Link)
			a = a.Next()
		}
		return b.String()
	}
	if err := n.batch(ctx, batch("add"), false, g); err != nil {
		// Some were added, maybe: remove what is there.
		_ = n.batch(context.WithoutCancel(ctx), batch("del"), true, g)
		return fmt.Errorf("%s: address storm: %w", n.Name, err)
	}
	if err := n.batch(context.WithoutCancel(ctx), batch("del"), false, g); err != nil {
		return fmt.Errorf("%s: address storm: %w", n.Name, err)
	}
	n.cluster.log.Info("address storm", "node", n.Name, "added_and_removed", count)
	return nil
}

// batch runs `ip -batch -` in the node's namespace with script as its
// input; with force, it goes on past a failed command. With g, ip joins g
// before it reads its first command.
func (n *Node) batch(ctx context.Context, script string, force bool, g *CPUGroup) error {
	argv := []string{"ip", "-n", n.Netns}
	if force {
		argv = append(argv, "-force")
	}
	argv = append(argv, "-batch", "-")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	if g != nil {
		if err := g.Add(cmd.Process.Pid); err != nil {
			_ = stdin.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
	}
	_, werr := io.WriteString(stdin, script)
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, firstLines(out.String(), 3))
	}
	if werr != nil {
		return fmt.Errorf("%s: writing its commands: %w", strings.Join(argv, " "), werr)
	}
	return nil
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// BurnScript is a shell program that keeps $1 cores busy, one shell
// running a loop of built-ins each, until it is killed or gets SIGTERM; as a PID
// namespace's init its exit ends the loops too. Any image with a POSIX
// shell runs it.
const BurnScript = `trap 'exit 0' TERM
i=0
while [ "$i" -lt "$1" ]; do
	sh -c 'while :; do :; done' &
	i=$((i+1))
done
wait`

// Burn starts BurnScript on cores loops in the node, every process of it
// in g, and returns it once all the loops run there; Kill stops them all.
func (n *Node) Burn(ctx context.Context, cores int, g *CPUGroup) (*Process, error) {
	p, err := n.Start(ctx, []string{"sh", "-c", BurnScript, "sh", strconv.Itoa(cores)}, nil, nil)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Process, error) {
		_ = p.Kill()
		<-p.Done()
		return nil, err
	}
	// The script forks its loops from the start: the ones forked before
	// it joined g are moved after it.
	if err := g.Add(p.Pid); err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, err := p.Procs()
		if err != nil {
			return fail(err)
		}
		in := 0
		for _, q := range ps {
			if err := g.Add(q.Pid); err != nil {
				return fail(err)
			}
			if ok, _ := g.Has(q.Pid); ok {
				in++
			}
		}
		if in >= cores+1 {
			n.cluster.log.Info("burning", "node", n.Name, "cores", cores, "cgroup", g.Path)
			return p, nil
		}
		if time.Now().After(deadline) || p.Exited() {
			return fail(fmt.Errorf("%s: %d of the burner's %d processes in cgroup %s", n.Name, in, cores+1, g.Path))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
