package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
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
