package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// splitBrain blocks VRRP on one node: it hears no adverts, takes every VIP
// the others hold, and both nodes of each doubled VIP report it; then VRRP
// flows again and the cluster heals.
func (d *demo) splitBrain(ctx context.Context) error {
	d.head("6. A split brain: VRRP blocked on one node")
	s0, err := d.settle(ctx, 30*time.Second, nil)
	if err != nil {
		return err
	}
	// Block a node that does not hold the first VIP, so at least that one
	// is doubled.
	var blocked *lab.Node
	for _, n := range d.c.Nodes {
		if s0.holders.one(d.vips[0]) != n {
			blocked = n
			break
		}
	}
	var doubled []netip.Addr
	for _, v := range d.vips {
		if s0.holders.one(v) != blocked {
			doubled = append(doubled, v)
		}
	}
	macs := map[*lab.Node]string{}
	for _, n := range d.c.Nodes {
		mac, err := n.MAC()
		if err != nil {
			return err
		}
		macs[n] = mac.String()
	}
	d.say("Dropping every VRRP packet that arrives at %s (an nft rule in its namespace), as a firewall", blocked.Name)
	d.say("change or a switch that drops multicast would. %s hears no adverts: after three advert", blocked.Name)
	d.say("intervals its keepalived becomes MASTER everywhere and adds %s,", addrList(doubled))
	d.say("which the other nodes still hold: each is now on two nodes.")
	d.say("  MACs: %s", macList(d.c.Nodes, macs))
	start := time.Now()
	if err := blocked.BlockVRRP(ctx); err != nil {
		return err
	}
	twice := map[netip.Addr]time.Duration{}
	if err := d.watch(ctx, func(h holders) bool {
		for _, v := range doubled {
			if _, ok := twice[v]; !ok && len(h[v]) == 2 {
				twice[v] = time.Since(start)
			}
		}
		return len(twice) == len(doubled)
	}); err != nil {
		return fmt.Errorf("waiting for %s to take the VIPs: %w", blocked.Name, err)
	}
	for _, v := range doubled {
		d.say("  %-12s on %s and %s after %s", v, s0.holders.one(v).Name, blocked.Name, ms(twice[v]))
	}

	d.say("Every node that holds a VIP asks the network whether another host answers for it too (an")
	d.say("RFC 5227 ARP probe when it takes the VIP and every 2 s, and it hears the other node's gratuitous")
	d.say("ARP); two answered rounds of probes, about three seconds, make a conflict:")
	seen, err := d.waitDuplicates(ctx, start, doubled, s0.holders, blocked, true)
	if err != nil {
		return err
	}
	var slowest time.Duration
	for _, v := range doubled {
		for _, n := range []*lab.Node{s0.holders.one(v), blocked} {
			at := seen[dupKey{n, v}]
			slowest = max(slowest, at-twice[v])
			d.say("  %-12s %s: ipfailover_vip_duplicate 1, mac=%s, %s after the second holder", v, n.Name, d.otherMAC(n, v, s0, blocked, macs), ms(at-twice[v]))
		}
	}
	if line := d.logLine(s0.holders.one(doubled[0]), "duplicate VIP: another host answers", "vip="+doubled[0].String()+" "); line != "" {
		d.say("  and once in each node's log, e.g. %s's:", s0.holders.one(doubled[0]).Name)
		d.say("    %s", line)
	}
	d.summary = append(d.summary, fmt.Sprintf("%-48s %s", "second holder to both nodes reporting it:", ms(slowest)))

	d.say("Removing the rule: %s hears the holders' higher priorities again and lets go.", blocked.Name)
	start = time.Now()
	if err := blocked.UnblockVRRP(ctx); err != nil {
		return err
	}
	var one time.Duration
	if err := d.watch(ctx, func(h holders) bool {
		for _, v := range doubled {
			if h.one(v) != s0.holders.one(v) {
				return false
			}
		}
		one = time.Since(start)
		return true
	}); err != nil {
		return fmt.Errorf("waiting for one holder per VIP again: %w", err)
	}
	seen, err = d.waitDuplicates(ctx, start, doubled, s0.holders, blocked, false)
	if err != nil {
		return err
	}
	var cleared time.Duration
	for _, at := range seen {
		cleared = max(cleared, at)
	}
	d.say("  one holder per VIP again after %s, each where it was; every ipfailover_vip_duplicate back", ms(one))
	d.say("  to 0 after %s (two silent rounds of probes). The log says when it ended:", ms(cleared))
	if line := d.logLine(s0.holders.one(doubled[0]), "duplicate VIP over", "vip="+doubled[0].String()+" "); line != "" {
		d.say("    %s", line)
	}
	// The guard never removed a VIP from a node whose keepalived was
	// MASTER for it: every holder was one.
	for _, n := range d.c.Nodes {
		m, err := scrape(ctx, d.c, n)
		if err != nil {
			return err
		}
		if m.StrayRemoved != 0 {
			return fmt.Errorf("%s removed %d VIPs as strays during the split brain: every holder was MASTER", n.Name, m.StrayRemoved)
		}
	}
	d.say("No VIP was removed by ipfailover (ipfailover_vip_stray_removed_total 0 on every node): each")
	d.say("holder's keepalived was MASTER; VRRP itself ended the split once adverts flowed.")
	d.summary = append(d.summary,
		fmt.Sprintf("%-48s %s", "VRRP back to one holder per VIP:", ms(one)),
		fmt.Sprintf("%-48s %s", "VRRP back to every duplicate gauge at 0:", ms(cleared)))
	s, err := d.settle(ctx, 30*time.Second, nil)
	if err != nil {
		return err
	}
	d.table(s)
	return nil
}

type dupKey struct {
	n   *lab.Node
	vip netip.Addr
}

// waitDuplicates scrapes the nodes of each doubled VIP (its holder and
// blocked) until each reports it as a duplicate (on) or not (off), and
// returns when each did, since start.
func (d *demo) waitDuplicates(ctx context.Context, start time.Time, vips []netip.Addr, h holders, blocked *lab.Node, on bool) (map[dupKey]time.Duration, error) {
	seen := map[dupKey]time.Duration{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, v := range vips {
			for _, n := range []*lab.Node{h.one(v), blocked} {
				k := dupKey{n, v}
				if _, ok := seen[k]; ok {
					continue
				}
				m, err := scrape(ctx, d.c, n)
				if err != nil {
					continue
				}
				if (len(m.Duplicate[v]) > 0) == on {
					seen[k] = time.Since(start)
				}
			}
		}
		if len(seen) == 2*len(vips) {
			return seen, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the nodes did not report the duplicates as %v within 30 s: %d of %d did", on, len(seen), 2*len(vips))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// otherMAC is the MAC n reports for vip: the blocked node's on the holder,
// the holder's on the blocked node.
func (d *demo) otherMAC(n *lab.Node, vip netip.Addr, s0 snapshot, blocked *lab.Node, macs map[*lab.Node]string) string {
	if n == blocked {
		return macs[s0.holders.one(vip)]
	}
	return macs[blocked]
}

func macList(ns []*lab.Node, macs map[*lab.Node]string) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name+" "+macs[n])
	}
	return strings.Join(s, ", ")
}

// logLine returns the message and attributes of the last line of n's
// ipfailover log that contains every one of subs, without the time.
func (d *demo) logLine(n *lab.Node, subs ...string) string {
	b, err := os.ReadFile(filepath.Join(d.logDir, n.Name+"-ipfailover.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	for _, line := range slices.Backward(lines) {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			if _, rest, found := strings.Cut(line, " level="); found {
				return "level=" + rest
			}
			return line
		}
	}
	return ""
}
