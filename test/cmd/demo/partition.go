package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// partitionHeals cuts one node's VRRP in the network both ways, lets it
// take every VIP, heals the cut towards it first and from it a moment
// later, and shows a client (connecting to every VIP every 10 ms) follow
// each VIP back to its holder.
func (d *demo) partitionHeals(ctx context.Context) error {
	d.head("7. A partition that heals one way first: clients follow every VIP back")
	s0, err := d.settle(ctx, 30*time.Second, nil)
	if err != nil {
		return err
	}
	victim := s0.holders.one(d.vips[0])
	var taken []netip.Addr
	for _, v := range d.vips {
		if s0.holders.one(v) != victim {
			taken = append(taken, v)
		}
	}
	macs := map[string]*lab.Node{}
	for _, n := range d.c.Nodes {
		mac, err := n.MAC()
		if err != nil {
			return err
		}
		macs[mac.String()] = n
	}
	targets := make([]netip.AddrPort, len(d.vips))
	for i, v := range d.vips {
		targets[i] = netip.AddrPortFrom(v, servicePort)
	}
	probe, err := d.c.ProbeTCP(targets, 10*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer probe.Stop()
	if err := probe.WaitSteady(ctx, time.Second, 30*time.Second); err != nil {
		return err
	}
	d.say("A client in its own namespace now connects to every VIP every 10 ms. A client reaches a VIP")
	d.say("through its ARP entry: the MAC of whichever node announced the VIP last.")
	d.say("The bridge drops every VRRP packet to and from %s, as a switch or a security group cutting it", victim.Name)
	d.say("off would: %s hears no master and takes %s too, announcing them;", victim.Name, addrList(taken))
	d.say("the others, hearing %s no more, keep theirs, and the best backup of %s takes it as well.", victim.Name, d.vips[0])
	start := time.Now()
	if err := victim.CutVRRP(ctx, lab.BothWays); err != nil {
		return err
	}
	var during holders
	if err := d.watch(ctx, func(h holders) bool {
		during = h
		for _, v := range d.vips {
			if len(h[v]) != 2 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("waiting for every VIP on two nodes: %w", err)
	}
	d.say("  after %s every VIP is on two nodes (%s); the client's entries, as the last", ms(time.Since(start)), during)
	d.say("  announcements left them:")
	if err := d.neighbours(ctx, macs); err != nil {
		return err
	}
	if err := sleepFor(ctx, 6*time.Second-time.Since(start)); err != nil {
		return err
	}

	d.say("The cut heals towards %s first: it hears the holders' higher priorities and lets go of", victim.Name)
	d.say("%s. keepalived has it send an advert of its own first, so that the", addrList(taken))
	d.say("holders, hearing a lower priority, announce their VIPs again; that advert cannot get out yet,")
	d.say("and the client's entries still name %s, which has those VIPs no longer. Each holder's", victim.Name)
	d.say("ipfailover has been asking %s every 200 ms whether it still has the VIP (an ARP probe to its", victim.Name)
	d.say("MAC alone); when it stops answering, the holder announces the VIP itself. 1.5 s later the cut")
	d.say("heals the other way too.")
	healed := time.Now()
	if err := victim.HealVRRP(ctx, lab.ToNode); err != nil {
		return err
	}
	if err := sleepFor(ctx, 1500*time.Millisecond); err != nil {
		return err
	}
	if err := victim.HealVRRP(ctx, lab.FromNode); err != nil {
		return err
	}
	if err := probe.WaitSteady(ctx, 2*time.Second, 30*time.Second); err != nil {
		return fmt.Errorf("after the heal: %w", err)
	}
	var worst time.Duration
	for i, v := range d.vips {
		out := probe.Outage(i, healed)
		worst = max(worst, out)
		d.say("  %-12s the client could not connect for %s at most after the heal", v, ms(out))
	}
	for _, v := range taken {
		if line := d.logLine(s0.holders.one(v), "VIP contest over", "vip="+v.String()+" "); line != "" {
			d.say("  %s: %s", s0.holders.one(v).Name, line)
		}
	}
	d.say("And the client's entries name each VIP's holder again:")
	if err := d.neighbours(ctx, macs); err != nil {
		return err
	}
	d.say("(The shipped image's keepalived.conf, healed the same way, leaves the client on %s for", victim.Name)
	d.say("those VIPs until some later fault announces them: `make bench` measures both.)")
	d.summary = append(d.summary, fmt.Sprintf("%-48s %s", "partition healed one way first: client outage:", ms(worst)))
	return nil
}

// neighbours prints the client's ARP entry for every VIP, with the node
// whose MAC it names.
func (d *demo) neighbours(ctx context.Context, macs map[string]*lab.Node) error {
	for _, v := range d.vips {
		mac, err := d.c.Client.NeighbourMAC(ctx, v)
		if err != nil {
			return err
		}
		name := mac
		switch {
		case mac == "":
			name = "none"
		case macs[mac] != nil:
			name += " (" + macs[mac].Name + ")"
		}
		d.say("    %-12s -> %s", v, name)
	}
	return nil
}

func sleepFor(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
