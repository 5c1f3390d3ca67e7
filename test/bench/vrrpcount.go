package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ipfailover/ipfailover/test/lab"
)

// countTable is the nftables table vrrpCounter adds in a node.
const countTable = "bench_vrrp_count"

// vrrpCounter counts the VRRP packets (IP protocol 112, IPv4 and IPv6) a
// node receives on and sends out of its eth0: two named nftables counters
// in the node's namespace, on the input and output hooks at a priority
// before any filter, so a packet a later rule drops is still counted as
// it arrived.
type vrrpCounter struct {
	n *lab.Node
}

// countVRRP adds the counters to n, starting at zero.
func countVRRP(ctx context.Context, n *lab.Node) (*vrrpCounter, error) {
	script := fmt.Sprintf(`add table inet %[1]s
add counter inet %[1]s vrrp_in
add counter inet %[1]s vrrp_out
add chain inet %[1]s input { type filter hook input priority -400 ; }
add chain inet %[1]s output { type filter hook output priority -400 ; }
add rule inet %[1]s input iifname %[2]q meta l4proto vrrp counter name "vrrp_in"
add rule inet %[1]s output oifname %[2]q meta l4proto vrrp counter name "vrrp_out"
`, countTable, lab.Link)
	if out, err := n.Exec(ctx, "nft", script); err != nil {
		return nil, fmt.Errorf("counting VRRP in %s: %w: %s", n.Name, err, out)
	}
	return &vrrpCounter{n: n}, nil
}

// read returns the packets received and sent since countVRRP.
func (v *vrrpCounter) read(ctx context.Context) (in, out uint64, err error) {
	b, err := v.n.Exec(ctx, "nft", "-j", "list", "counters", "table", "inet", countTable)
	if err != nil {
		return 0, 0, err
	}
	return parseCounters(b)
}

// parseCounters reads the vrrp_in and vrrp_out packet counts of `nft -j
// list counters`.
func parseCounters(b []byte) (in, out uint64, err error) {
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, 0, fmt.Errorf("nft counters: %w", err)
	}
	found := 0
	for _, o := range doc.Nftables {
		switch {
		case o.Counter == nil:
		case o.Counter.Name == "vrrp_in":
			in = o.Counter.Packets
			found++
		case o.Counter.Name == "vrrp_out":
			out = o.Counter.Packets
			found++
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("nft counters: want vrrp_in and vrrp_out in %s", b)
	}
	return in, out, nil
}

// remove deletes the table.
func (v *vrrpCounter) remove(ctx context.Context) error {
	if out, err := v.n.Exec(ctx, "nft", "delete", "table", "inet", countTable); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// rawDrops sums the drops column of the raw IPv4 and IPv6 sockets of
// protocol 112 (keepalived's VRRP sockets) in the network namespace of
// pid: adverts that arrived but found the socket's receive buffer full.
func rawDrops(pid int) (uint64, error) {
	var total uint64
	for _, f := range []string{"raw", "raw6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return 0, err
		}
		n, err := parseRawDrops(string(b))
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/net/%s: %w", pid, f, err)
		}
		total += n
	}
	return total, nil
}

// parseRawDrops reads /proc/net/raw or raw6: the local port of a raw
// socket is its protocol, the last column its drops.
func parseRawDrops(table string) (uint64, error) {
	var total uint64
	lines := strings.Split(strings.TrimSpace(table), "\n")
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasSuffix(f[1], ":0070") {
			continue
		}
		n, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: %w", line, err)
		}
		total += n
	}
	return total, nil
}
