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

// snapshot is one consistent view of the cluster.
type snapshot struct {
	holders holders
	metrics map[*lab.Node]nodeMetrics
	answers map[netip.Addr]string
}

// instance returns the VRRP instance of vip as the nodes report it.
func (s snapshot) instance(vip netip.Addr) string {
	for _, m := range s.metrics {
		if in := m.Instance[vip]; in != "" {
			return in
		}
	}
	return "?"
}

// settle waits until every VIP has exactly one holder, that holder's
// keepalived says MASTER for the VIP's instance and no other running one
// does, a GET to the VIP from the client answers with the holder's name,
// and want (nil: none) finds nothing wrong.
func (d *demo) settle(ctx context.Context, limit time.Duration, want func(snapshot) string) (snapshot, error) {
	deadline := time.Now().Add(limit)
	for {
		s, why, err := d.look(ctx)
		if err != nil {
			return s, err
		}
		if why == "" && want != nil {
			why = want(s)
		}
		if why == "" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("the cluster did not settle in %s: %s", limit, why)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// look takes a snapshot and says what is not settled in it ("" when all
// is).
func (d *demo) look(ctx context.Context) (snapshot, string, error) {
	s := snapshot{metrics: map[*lab.Node]nodeMetrics{}, answers: map[netip.Addr]string{}}
	if err := d.exits(); err != nil {
		return s, "", err
	}
	h, err := observe(d.c, d.vips)
	if err != nil {
		return s, "", err
	}
	s.holders = h
	var problems []string
	for _, n := range d.c.Nodes {
		if !d.running(n) {
			continue
		}
		m, err := scrape(ctx, d.c, n)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s metrics: %v", n.Name, err))
			continue
		}
		s.metrics[n] = m
		if m.Restarts != "" && m.Restarts != "0" {
			d.restarted[n] = m.Restarts
		}
	}
	for _, v := range d.vips {
		holder := h.one(v)
		if holder == nil {
			problems = append(problems, fmt.Sprintf("%s has %d holders", v, len(h[v])))
			continue
		}
		in := s.instance(v)
		for n, m := range s.metrics {
			if st := m.State[in]; (n == holder) != (st == "MASTER") {
				problems = append(problems, fmt.Sprintf("%s holds %s, %s's keepalived says %s for %s", holder.Name, v, n.Name, st, in))
			}
		}
		body, err := get(ctx, d.c, fmt.Sprintf("http://%s:%d/", v, servicePort))
		if err != nil {
			body = "error: " + err.Error()
		}
		s.answers[v] = body
		if body != holder.Name {
			problems = append(problems, fmt.Sprintf("GET %s answered %q, want %q", v, body, holder.Name))
		}
	}
	return s, strings.Join(problems, "; "), ctx.Err()
}

// exits reports a program of the demo that exited without being asked to,
// with the end of its output.
func (d *demo) exits() error {
	for _, n := range d.c.Nodes {
		for what, p := range map[string]*lab.Process{"ipfailover": d.ipf[n], "web": d.svc[n]} {
			if p == nil || !p.Exited() || d.stopped[p] {
				continue
			}
			code, _ := p.Wait(context.Background())
			log := filepath.Join(d.logDir, n.Name+"-"+what+".log")
			return fmt.Errorf("%s's %s exited with code %d on its own; the end of %s:\n%s", n.Name, what, code, log, tail(log, 8))
		}
	}
	return nil
}

// tail returns the last n lines of a file, indented.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "  " + strings.Join(lines, "\n  ")
}

func (d *demo) running(n *lab.Node) bool {
	return d.ipf[n] != nil && !d.ipf[n].Exited()
}

// table prints who holds which VIP, as the kernel, keepalived and a client
// see it.
func (d *demo) table(s snapshot) {
	header := fmt.Sprintf("  %-12s %-11s %-7s", "VIP", "instance", "holder")
	for _, n := range d.c.Nodes {
		header += fmt.Sprintf(" %-11s", n.Name)
	}
	d.say("%s GET http://VIP:%d/", header, servicePort)
	for _, v := range d.vips {
		holder := "none"
		if n := s.holders.one(v); n != nil {
			holder = n.Name
		}
		in := s.instance(v)
		row := fmt.Sprintf("  %-12s %-11s %-7s", v, in, holder)
		for _, n := range d.c.Nodes {
			cell := "stopped"
			if m, ok := s.metrics[n]; ok {
				prio, _ := d.conf[n].priority(in)
				cell = fmt.Sprintf("%s %d", m.State[in], prio)
			}
			row += fmt.Sprintf(" %-11s", cell)
		}
		d.say("%s %q", row, s.answers[v])
	}
}

// legend explains the table's columns; printed once.
func (d *demo) legend() {
	d.say("  holder: whose eth0 has the VIP, read from the kernel. Per node: its keepalived's state")
	d.say("  (keepalived_vrrp_state on its :9650/metrics) and priority (its keepalived.conf). Last: the")
	d.say("  answer to a GET from the client namespace, which goes wherever the VIP is.")
}

// watchLimit bounds every wait of watch.
const watchLimit = 30 * time.Second

// watch reads the kernel every pollEvery until done accepts what it sees,
// or watchLimit passes.
func (d *demo) watch(ctx context.Context, done func(holders) bool) error {
	ctx, cancel := context.WithTimeout(ctx, watchLimit)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	begin := time.Now()
	defer func() { d.polling += time.Since(begin) }()
	for {
		h, err := observe(d.c, d.vips)
		if err != nil {
			return err
		}
		d.polls++
		if done(h) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w; last seen: %v", watchLimit, ctx.Err(), h)
		case <-tick.C:
		}
	}
}

// move is one VIP changing nodes: when it left and when it arrived,
// counted from the demo's action.
type move struct {
	vip      netip.Addr
	from, to *lab.Node
	gone, up time.Duration
	// both is how many reads saw the VIP on two nodes at once.
	both int
}

// watchMoves waits until every VIP of vips is held by exactly one node
// other than from, and says when each left from and arrived.
func (d *demo) watchMoves(ctx context.Context, start time.Time, from *lab.Node, vips []netip.Addr) ([]move, error) {
	moves := make([]move, len(vips))
	for i, v := range vips {
		moves[i] = move{vip: v, from: from}
	}
	err := d.track(ctx, start, moves, func(m *move, h holders) bool {
		if n := h.one(m.vip); n != nil && n != from {
			m.to = n
			return true
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %s to leave %s: %w", addrList(vips), from.Name, err)
	}
	return moves, nil
}

// watchReturn waits until every VIP of vips is held by to alone, and says
// when each arrived.
func (d *demo) watchReturn(ctx context.Context, start time.Time, to *lab.Node, vips []netip.Addr, h0 holders) ([]move, error) {
	moves := make([]move, len(vips))
	for i, v := range vips {
		moves[i] = move{vip: v, from: h0.one(v), to: to}
	}
	err := d.track(ctx, start, moves, func(m *move, h holders) bool { return h.one(m.vip) == to })
	if err != nil {
		return nil, fmt.Errorf("waiting for %s to come back to %s: %w", addrList(vips), to.Name, err)
	}
	return moves, nil
}

// track watches the holders until arrived has held for every move, noting
// when each VIP left its from node, when it arrived, and how often it was
// seen on two nodes.
func (d *demo) track(ctx context.Context, start time.Time, moves []move, arrived func(*move, holders) bool) error {
	return d.watch(ctx, func(h holders) bool {
		now := time.Since(start)
		all := true
		for i := range moves {
			m := &moves[i]
			if len(h[m.vip]) > 1 {
				m.both++
			}
			if m.gone == 0 && m.from != nil && !slices.Contains(h[m.vip], m.from) {
				m.gone = now
			}
			if m.up == 0 && arrived(m, h) {
				m.up = now
			}
			all = all && m.up != 0
		}
		return all
	})
}

func (d *demo) printMoves(moves []move) {
	for _, m := range moves {
		from := "none"
		if m.from != nil {
			from = m.from.Name
		}
		d.say("  %-12s %s -> %s   gone from %s after %s, up on %s after %s",
			m.vip, from, m.to.Name, from, ms(m.gone), m.to.Name, ms(m.up))
		if m.both > 0 {
			d.say("  %-12s (on both nodes for %d read(s) of the kernel, about %s: the new holder adds it", "", m.both, ms(time.Duration(m.both)*pollEvery))
			d.say("  %-12s before the old one has heard its advert and dropped it)", "")
		}
	}
	if len(moves) == 0 {
		d.say("  no VIP moves")
	}
}

func slowest(moves []move) time.Duration {
	var s time.Duration
	for _, m := range moves {
		s = max(s, m.up)
	}
	return s
}

// waitStates waits until every instance of n's keepalived is in one of
// states, and returns the time since start.
func (d *demo) waitStates(ctx context.Context, n *lab.Node, start time.Time, states ...string) (time.Duration, error) {
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		if err := d.exits(); err != nil {
			return 0, err
		}
		m, err := scrape(ctx, d.c, n)
		if err == nil && len(m.State) > 0 {
			ok := true
			var all []string
			for in, st := range m.State {
				ok = ok && slices.Contains(states, st)
				all = append(all, in+"="+st)
			}
			if ok {
				return time.Since(start), nil
			}
			slices.Sort(all)
			last = strings.Join(all, " ")
		} else if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s's keepalived never reached %s: last %s", n.Name, strings.Join(states, " or "), last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// priorities describes who has which priority for instance in, e.g.
// "node1 235, node2 249, node3 240".
func (d *demo) priorities(in string) string {
	var s []string
	for _, n := range d.c.Nodes {
		if prio, ok := d.conf[n].priority(in); ok {
			s = append(s, fmt.Sprintf("%s %d", n.Name, prio))
		}
	}
	return strings.Join(s, ", ")
}

// best returns the node with the highest priority for instance in (the
// higher address on a tie, as VRRP decides).
func (d *demo) best(in string) *lab.Node {
	var (
		best     *lab.Node
		bestPrio int
	)
	for _, n := range d.c.Nodes {
		prio, ok := d.conf[n].priority(in)
		if !ok {
			continue
		}
		if best == nil || prio > bestPrio || prio == bestPrio && n.Addr4.Compare(best.Addr4) > 0 {
			best, bestPrio = n, prio
		}
	}
	return best
}

func avg(total time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", float64(total.Microseconds())/float64(n)/1000)
}
