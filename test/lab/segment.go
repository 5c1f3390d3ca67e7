package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Impairment is what a bad segment does to the frames the bridge forwards
// between the nodes and the client: the job of tc netem, which this
// project's kernels do not have (CONFIG_NET_SCH_NETEM is off). Loss is an
// nftables rule in the bridge (numgen random), so it hits every frame: ARP,
// neighbour discovery, VRRP, TCP. Delay and reordering hold IPv4 and IPv6
// packets in a netfilter queue (br_netfilter passes bridged packets through
// the iptables FORWARD chain, whose NFQUEUE rule hands them to the harness)
// for Delay±Jitter each; packets closer together than the jitter overtake
// each other. ARP and neighbour discovery's frames are not delayed.
type Impairment struct {
	// Loss is the share of frames dropped, 0..1.
	Loss float64
	// Delay and Jitter: each IP packet is held for a time drawn evenly from
	// [Delay-Jitter, Delay+Jitter]. Jitter must not exceed Delay.
	Delay, Jitter time.Duration
	// Seed draws the delays.
	Seed uint64
}

func (i Impairment) String() string {
	return fmt.Sprintf("loss %.1f%%, delay %s ± %s", i.Loss*100, i.Delay, i.Jitter)
}

// segmentTable is the bridge's nftables table of the loss rule.
const segmentTable = "lab_segment"

// segmentQueue is the netfilter queue number of the delay (queues are per
// network namespace, so the number is the bridge's own).
const segmentQueue = 7

// Impaired is a segment impairment in force; Restore ends it.
type Impaired struct {
	c     *Cluster
	imp   Impairment
	queue *delayQueue
}

// Impair makes the bridge lose, delay and reorder what it forwards, until
// Restore. One impairment at a time.
func (c *Cluster) Impair(ctx context.Context, imp Impairment) (*Impaired, error) {
	if imp.Loss < 0 || imp.Loss > 1 || imp.Delay < 0 || imp.Jitter < 0 || imp.Jitter > imp.Delay {
		return nil, fmt.Errorf("lab: impairment %s: loss must be 0..1 and jitter 0..delay", imp)
	}
	i := &Impaired{c: c, imp: imp}
	if imp.Delay > 0 {
		err := InNetns(c.bridgeNetns, func() error {
			var err error
			i.queue, err = openDelayQueue(segmentQueue, imp.Delay, imp.Jitter, imp.Seed)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, ipt := range []string{"iptables", "ip6tables"} {
			// --queue-bypass: a packet passes when nobody reads the queue.
			if _, err := c.BridgeExec(ctx, ipt, "-w", "-A", "FORWARD", "-j", "NFQUEUE", "--queue-num", strconv.Itoa(segmentQueue), "--queue-bypass"); err != nil {
				return nil, errors.Join(err, i.Restore(ctx))
			}
		}
	}
	if imp.Loss > 0 {
		drop := []string{"drop"}
		if perMillion := int(imp.Loss * 1e6); perMillion < 1e6 {
			drop = []string{"numgen", "random", "mod", "1000000", "<", strconv.Itoa(perMillion), "drop"}
		}
		for _, argv := range [][]string{
			{"nft", "add", "table", "bridge", segmentTable},
			{"nft", "add", "chain", "bridge", segmentTable, "forward", "{ type filter hook forward priority -200 ; }"},
			append([]string{"nft", "add", "rule", "bridge", segmentTable, "forward"}, drop...),
		} {
			if _, err := c.BridgeExec(ctx, argv...); err != nil {
				return nil, errors.Join(err, i.Restore(ctx))
			}
		}
	}
	c.log.Info("segment impaired", "impairment", imp.String())
	return i, nil
}

// Restore removes the impairment's rules and tables from the bridge (the
// iptables rules' tables included, which nothing else there uses) and lets
// every delayed packet go. It reports how many packets were delayed.
func (i *Impaired) Restore(ctx context.Context) error {
	var errs []error
	tables, err := i.c.BridgeTables(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, table := range []string{"bridge " + segmentTable, "ip filter", "ip6 filter"} {
		if !slices.Contains(tables, table) {
			continue
		}
		if _, err := i.c.BridgeExec(ctx, append([]string{"nft", "delete", "table"}, strings.Fields(table)...)...); err != nil {
			errs = append(errs, err)
		}
	}
	held := 0
	if i.queue != nil {
		held = i.queue.Held()
		errs = append(errs, i.queue.Close())
		i.queue = nil
	}
	err = errors.Join(errs...)
	i.c.log.Info("segment restored", "impairment", i.imp.String(), "delayed_packets", held, "error", err)
	return err
}

// Delayed returns how many packets the impairment has delayed so far.
func (i *Impaired) Delayed() int {
	if i.queue == nil {
		return 0
	}
	return i.queue.Held()
}
