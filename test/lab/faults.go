package lab

import (
	"context"
	"fmt"
	"strings"
	"syscall"
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
