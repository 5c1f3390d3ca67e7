package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/check"
	"github.com/ipfailover/ipfailover/test/lab"
)

// start starts the web service and ipfailover on every node and waits for
// VRRP to elect one holder per VIP.
func (d *demo) start(ctx context.Context) error {
	c := d.c
	d.say("Made a lab of network namespaces: a bridge, %s (%s-%d) and a client (%s).",
		nodeNames(c.Nodes), c.Nodes[0].Addr4, c.Nodes[len(c.Nodes)-1].Addr4.As4()[3], c.Client.Addr4)
	d.say("Each node runs two programs the way pods run (own PID and mount namespace):")
	d.say("  a web service on :%d that answers with the node's name, and", servicePort)
	d.say("  ipfailover, which writes keepalived.conf and supervises the real keepalived, set with")
	for _, s := range settings {
		d.say("    %-42s %s", s[0], s[1])
	}
	for _, n := range c.Nodes {
		if err := d.startService(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := d.waitService(ctx, n); err != nil {
			return err
		}
	}
	start := time.Now()
	for _, n := range c.Nodes {
		if err := d.startIPFailover(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if _, err := d.waitStates(ctx, n, start, "BACKUP", "MASTER"); err != nil {
			return err
		}
		conf, err := readConf(d.ipf[n])
		if err != nil {
			return err
		}
		d.conf[n] = conf
	}
	// Every VIP on the node with the highest priority for its instance:
	// keepalived starts every instance as BACKUP and the elections take
	// a few adverts.
	s, err := d.settle(ctx, 60*time.Second, func(s snapshot) string {
		for _, v := range d.vips {
			if best := d.best(s.instance(v)); s.holders.one(v) != best {
				return fmt.Sprintf("%s is not yet on %s, its highest-priority node", v, best.Name)
			}
		}
		return ""
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	for _, v := range d.vips {
		d.home[v] = s.holders.one(v)
	}
	d.say("Each VIP went to the node with the highest priority for it %s after ipfailover started.", ms(took))
	d.summary = append(d.summary, fmt.Sprintf("%-48s %s", "start to every VIP on its preferred node:", ms(took)))

	rule := "-A INPUT -d 224.0.0.18/32 -j ACCEPT"
	for _, n := range c.Nodes {
		out, err := n.Exec(ctx, "iptables", "-S", "INPUT")
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 2 || lines[1] != rule {
			return fmt.Errorf("%s: iptables -S INPUT = %q, want %q first", n.Name, out, rule)
		}
	}
	d.say("Firewall: iptables -S INPUT in every node lists %q first.", rule)
	return nil
}

func (d *demo) show(ctx context.Context) error {
	d.head("2. Who holds which VIP")
	s, err := d.settle(ctx, 10*time.Second, nil)
	if err != nil {
		return err
	}
	d.table(s)
	d.legend()
	d.say("Priorities come from each node's address, the same on every start, so the VIPs spread over")
	d.say("the nodes and every node knows which ones it is preferred for.")
	return nil
}

func (d *demo) serviceFails(ctx context.Context) error {
	d.head("3. A node's service fails: its VIP moves")
	h, err := observe(d.c, d.vips)
	if err != nil {
		return err
	}
	victim := h.one(d.vips[0])
	if victim == nil {
		return fmt.Errorf("%s has no single holder: %v", d.vips[0], h)
	}
	moving := h.held(victim)
	d.say("Killing the web service on %s, which holds %s. ipfailover's check connects to %s:%d", victim.Name, addrList(moving), victim.Addr4, servicePort)
	d.say("every %s (OPENSHIFT_HA_CHECK_INTERVAL unset), every %s once a connect fails; %d failures", ms(config.DefaultPortCheckInterval), ms(check.Retry), check.Fall)
	d.say("in a row and it tells keepalived (a file keepalived watches), whose instances on %s go", victim.Name)
	d.say("to FAULT and drop their VIPs; the node with the next highest priority takes each over.")
	start := time.Now()
	d.stopped[d.svc[victim]] = true
	if err := d.svc[victim].Kill(); err != nil {
		return err
	}
	moves, err := d.watchMoves(ctx, start, victim, moving)
	if err != nil {
		return err
	}
	d.printMoves(moves)
	d.summary = append(d.summary, fmt.Sprintf("%-48s %s (check every %s; the shipped image's: 1.7-1.9 s)", "service killed to its VIP up on another node:", ms(slowest(moves)), ms(config.DefaultPortCheckInterval)))
	s, err := d.settle(ctx, 10*time.Second, func(s snapshot) string {
		for in, st := range s.metrics[victim].State {
			if st != "FAULT" {
				return fmt.Sprintf("%s's keepalived says %s for %s, want FAULT", victim.Name, st, in)
			}
		}
		return ""
	})
	if err != nil {
		return err
	}
	d.table(s)

	d.say("Starting %s's web service again.", victim.Name)
	start = time.Now()
	if err := d.startService(ctx, victim); err != nil {
		return err
	}
	took, err := d.waitStates(ctx, victim, start, "BACKUP", "MASTER")
	if err != nil {
		return err
	}
	d.say("  The check passes: %s's instances left FAULT %s after the start.", victim.Name, ms(took))
	return d.comeBack(ctx, victim, start, s)
}

// comeBack shows the VIPs n prefers returning to n after it recovered, and
// says why.
func (d *demo) comeBack(ctx context.Context, n *lab.Node, start time.Time, s snapshot) error {
	var back, stay []netip.Addr
	for _, v := range d.vips {
		if d.home[v] != n {
			continue
		}
		if d.conf[n].master(s.instance(v)) {
			back = append(back, v)
		} else {
			stay = append(stay, v)
		}
	}
	moves, err := d.watchReturn(ctx, start, n, back, s.holders)
	if err != nil {
		return err
	}
	d.printMoves(moves)
	for _, v := range back {
		in := s.instance(v)
		if d.explained {
			d.say("  %s takes %s back, for the reason seen in step 3.", n.Name, v)
			continue
		}
		d.explained = true
		d.say("  Why: %s has the highest priority for %s (%s),", n.Name, in, d.priorities(in))
		d.say("  and its keepalived.conf starts that instance as MASTER, for which keepalived ignores")
		d.say("  preempt_delay (its log says so). So %s ignores the lower-priority adverts and takes", n.Name)
		d.say("  %s back when its master-down timer (3 adverts + skew) runs out.", v)
	}
	for _, v := range stay {
		d.say("  %s stays where it is: OPENSHIFT_HA_PREEMPTION's default, preempt_delay 300, holds %s back.", v, n.Name)
	}
	s, err = d.settle(ctx, 10*time.Second, func(s snapshot) string {
		for _, v := range back {
			if s.holders.one(v) != n {
				return fmt.Sprintf("%s left %s again", v, n.Name)
			}
		}
		return ""
	})
	if err != nil {
		return err
	}
	d.table(s)
	return nil
}

func (d *demo) rollPod(ctx context.Context) error {
	d.head("4. A rolling update: SIGTERM to a pod's ipfailover")
	s0, err := d.settle(ctx, 10*time.Second, nil)
	if err != nil {
		return err
	}
	h := s0.holders
	victim := h.one(d.vips[0])
	if victim == nil {
		return fmt.Errorf("%s has no single holder: %v", d.vips[0], h)
	}
	moving := h.held(victim)
	d.say("Sending SIGTERM to ipfailover on %s, which holds %s, as the kubelet does to", victim.Name, addrList(moving))
	d.say("the pod it replaces. ipfailover passes it to keepalived, which sends priority-0 adverts, so")
	d.say("a backup takes over at once instead of waiting for three missed adverts. Then it exits.")
	p := d.ipf[victim]
	d.stopped[p] = true
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	moves, err := d.watchMoves(ctx, start, victim, moving)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	code, err := p.Wait(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s's ipfailover did not exit after SIGTERM: %w", victim.Name, err)
	}
	exited := time.Since(start)
	d.printMoves(moves)
	if code != 0 {
		return fmt.Errorf("%s's ipfailover exited %d after SIGTERM, want 0", victim.Name, code)
	}
	addrs, err := victim.Addrs()
	if err != nil {
		return err
	}
	var own, left []string
	for _, a := range addrs {
		if slices.Contains(d.vips, a.Addr()) {
			left = append(left, a.String())
		}
		own = append(own, a.String())
	}
	if len(left) > 0 {
		return fmt.Errorf("%s still has %s after its ipfailover exited", victim.Name, strings.Join(left, ", "))
	}
	for _, m := range moves {
		p, _ := d.conf[m.to].priority(s0.instance(m.vip))
		d.say("  %s first waits its skew time, (256 - %d)/256 s = %d ms, after the priority-0 advert.",
			m.to.Name, p, (256-p)*1000/256)
	}
	d.say("  %s's ipfailover exited with code 0, %s after the SIGTERM.", victim.Name, ms(exited))
	if took := d.stopTook(victim); took > exited/2 {
		d.say("  Most of that is keepalived's own shutdown: %s, says ipfailover's log.", ms(took))
	} else if took > 0 {
		d.say("  keepalived's own shutdown took %s of it, says ipfailover's log.", ms(took))
	}
	d.say("  %s's eth0 keeps only its own addresses: %s.", victim.Name, strings.Join(own, " "))
	d.summary = append(d.summary,
		fmt.Sprintf("%-48s %s", "SIGTERM to its VIP up on another node:", ms(slowest(moves))),
		fmt.Sprintf("%-48s %s", "SIGTERM to ipfailover exited 0:", ms(exited)))

	s, err := d.settle(ctx, 10*time.Second, nil)
	if err != nil {
		return err
	}
	d.table(s)
	d.rolled = victim
	return nil
}

func (d *demo) rejoin(ctx context.Context) error {
	n := d.rolled
	d.head("5. The new pod starts: the node rejoins")
	d.say("Starting ipfailover on %s again, with the same settings.", n.Name)
	s, err := d.settle(ctx, 10*time.Second, nil)
	if err != nil {
		return err
	}
	old := d.conf[n]
	start := time.Now()
	if err := d.startIPFailover(ctx, n); err != nil {
		return err
	}
	took, err := d.waitStates(ctx, n, start, "BACKUP", "MASTER")
	if err != nil {
		return err
	}
	conf, err := readConf(d.ipf[n])
	if err != nil {
		return err
	}
	if conf.text != old.text {
		return fmt.Errorf("%s's keepalived.conf changed across the restart:\n%s\nthen:\n%s", n.Name, old.text, conf.text)
	}
	d.say("  Its keepalived.conf is byte for byte the one it ran before; its instances were BACKUP %s", ms(took))
	d.say("  after the start.")
	d.summary = append(d.summary, fmt.Sprintf("%-48s %s", "restart to :9650 showing every instance BACKUP:", ms(took)))
	if err := d.comeBack(ctx, n, start, s); err != nil {
		return err
	}
	h, err := observe(d.c, d.vips)
	if err != nil {
		return err
	}
	home := true
	for _, v := range d.vips {
		home = home && h.one(v) == d.home[v]
	}
	if home {
		d.say("Every VIP is back where it was in step 2.")
	}
	return nil
}

// stopTook returns how long keepalived took to stop, from the last
// "keepalived stopped" line of n's ipfailover log, or 0.
func (d *demo) stopTook(n *lab.Node) time.Duration {
	b, err := os.ReadFile(filepath.Join(d.logDir, n.Name+"-ipfailover.log"))
	if err != nil {
		return 0
	}
	var took time.Duration
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, `msg="keepalived stopped"`) {
			continue
		}
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "took="); ok {
				if t, err := time.ParseDuration(v); err == nil {
					took = t
				}
			}
		}
	}
	return took
}
