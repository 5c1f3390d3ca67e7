package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// blockTable is the nftables table BlockVRRP adds in a node.
const blockTable = "lab_block_vrrp"

// BlockVRRP drops every VRRP packet (IPv4 and IPv6) that arrives at the
// node, as a firewall change or a switch dropping multicast would: the
// node's keepalived hears no adverts and takes every VIP. Everything else
// still flows (ARP, neighbour discovery, the node's own adverts out).
// UnblockVRRP undoes it.
func (n *Node) BlockVRRP(ctx context.Context) error {
	for _, argv := range [][]string{
		{"nft", "add", "table", "inet", blockTable},
		{"nft", "add", "chain", "inet", blockTable, "input", "{ type filter hook input priority -300 ; }"},
		{"nft", "add", "rule", "inet", blockTable, "input", "meta", "l4proto", "vrrp", "drop"},
	} {
		if _, err := n.Exec(ctx, argv...); err != nil {
			return err
		}
	}
	n.cluster.log.Info("VRRP blocked", "node", n.Name)
	return nil
}

// UnblockVRRP removes BlockVRRP's rule.
func (n *Node) UnblockVRRP(ctx context.Context) error {
	if _, err := n.Exec(ctx, "nft", "delete", "table", "inet", blockTable); err != nil {
		return err
	}
	n.cluster.log.Info("VRRP unblocked", "node", n.Name)
	return nil
}

// Direction is which of a node's VRRP traffic a cut drops.
type Direction int

// The directions of CutVRRP.
const (
	// ToNode drops the VRRP packets the bridge would deliver to the node.
	ToNode Direction = 1 << iota
	// FromNode drops the VRRP packets the node sends.
	FromNode
	// BothWays is a VRRP partition of the node.
	BothWays = ToNode | FromNode
)

func (d Direction) String() string {
	switch d {
	case ToNode:
		return "to"
	case FromNode:
		return "from"
	case BothWays:
		return "both ways"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// cutTable is the bridge-family nftables table of one direction of one
// node's cut, in the bridge's namespace.
func (n *Node) cutTable(d Direction) string {
	return "lab_cut_" + n.Name + "_" + d.String()
}

// CutVRRP drops, in the bridge, the node's VRRP packets (IPv4 and IPv6,
// multicast and unicast) in the given directions: a partition of the VRRP
// domain in the network, as a switch or a cloud's security group would make
// it. Nothing on the node changes (keepalived sends without an error);
// everything else (ARP, neighbour discovery, the clients' traffic) still
// flows. Each direction is its own table, so HealVRRP can restore one
// before the other; one nft run per call.
func (n *Node) CutVRRP(ctx context.Context, d Direction) error {
	var script strings.Builder
	for _, dir := range []Direction{ToNode, FromNode} {
		if d&dir == 0 {
			continue
		}
		t, port := n.cutTable(dir), "oifname"
		if dir == FromNode {
			port = "iifname"
		}
		fmt.Fprintf(&script, "add table bridge %[1]s\n"+
			"add chain bridge %[1]s forward { type filter hook forward priority -300 ; }\n"+
			"add rule bridge %[1]s forward %[2]s %[3]q ether type ip ip protocol vrrp drop\n"+
			"add rule bridge %[1]s forward %[2]s %[3]q ether type ip6 ip6 nexthdr vrrp drop\n", t, port, n.port)
	}
	if out, err := n.cluster.BridgeExec(ctx, "nft", script.String()); err != nil {
		return fmt.Errorf("cutting VRRP %s %s: %w: %s", d, n.Name, err, out)
	}
	n.cluster.log.Info("VRRP cut", "node", n.Name, "direction", d.String())
	return nil
}

// HealVRRP removes CutVRRP's drops in the given directions.
func (n *Node) HealVRRP(ctx context.Context, d Direction) error {
	var script strings.Builder
	for _, dir := range []Direction{ToNode, FromNode} {
		if d&dir != 0 {
			fmt.Fprintf(&script, "delete table bridge %s\n", n.cutTable(dir))
		}
	}
	if out, err := n.cluster.BridgeExec(ctx, "nft", script.String()); err != nil {
		return fmt.Errorf("healing VRRP %s %s: %w: %s", d, n.Name, err, out)
	}
	n.cluster.log.Info("VRRP healed", "node", n.Name, "direction", d.String())
	return nil
}

// NeighbourMAC returns the MAC of the node's neighbour entry for addr on
// eth0 ("" when it has none): where it sends packets for addr.
func (n *Node) NeighbourMAC(ctx context.Context, addr netip.Addr) (string, error) {
	all, err := n.Neighbours(ctx)
	return all[addr], err
}

// Neighbours returns the MAC of every neighbour entry on eth0, IPv4 and
// IPv6, by address ("" for an entry without one: incomplete or failed),
// read at once.
func (n *Node) Neighbours(ctx context.Context) (map[netip.Addr]string, error) {
	out, err := n.Exec(ctx, "ip", "neigh", "show", "dev", Link)
	if err != nil {
		return nil, fmt.Errorf("ip neigh show on %s: %w: %s", n.Name, err, out)
	}
	return parseNeighbours(string(out)), nil
}

// parseNeighbours reads "ip neigh show dev X": "ADDR [lladdr MAC] [router]
// STATE" a line.
func parseNeighbours(out string) map[netip.Addr]string {
	all := map[netip.Addr]string{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		all[a] = ""
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "lladdr" {
				all[a] = f[i+1]
			}
		}
	}
	return all
}

// MAC returns the Ethernet address of the node's eth0.
func (n *Node) MAC() (net.HardwareAddr, error) {
	_, link, err := n.eth0()
	if err != nil {
		return nil, err
	}
	return link.Attrs().HardwareAddr, nil
}

// StartKeepalived runs a plain keepalived on the node (no ipfailover) with
// the configuration conf, in the foreground with its log on out: another
// VRRP deployment on the same network. The configuration file is written
// to a directory under /var/tmp, which the node sees, and removed when
// the process exits.
func (n *Node) StartKeepalived(ctx context.Context, conf string, out io.Writer) (*Process, error) {
	dir, err := os.MkdirTemp("/var/tmp", "lab-keepalived-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p, err := n.Start(ctx, []string{"keepalived", "-n", "-l", "-D", "-f", path}, nil, out)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting a plain keepalived on %s: %w", n.Name, err)
	}
	go func() {
		<-p.Done()
		os.RemoveAll(dir)
	}()
	return p, nil
}
