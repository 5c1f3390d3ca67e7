package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// TCPProbe is a client of the VIPs: from the client namespace it connects
// over TCP to every target every interval, each attempt on its own, and
// notes which connected within the deadline, by the kernel's clock (the
// handshake's round trip, with no SYN sent twice: see socketMaker.connect). A connection goes wherever
// the client's neighbour entry for the VIP points (or its route, after an
// ICMP redirect), so the probe sees what a client sees: a VIP whose
// holder's gratuitous ARP the client never got is unreachable, however
// healthy VRRP is.
type TCPProbe struct {
	sockets  *socketMaker
	targets  []netip.AddrPort
	interval time.Duration
	deadline time.Duration

	mu   sync.Mutex
	sent [][]time.Time
	ok   [][]bool
	// spacing is the longest time between two rounds of attempts: the
	// interval, unless the prober itself ran late on a busy machine, which
	// lengthens every outage it sees.
	spacing time.Duration
	stop    chan struct{}
	loop    sync.WaitGroup
	tries   sync.WaitGroup
}

// ProbeTCP starts probing targets (IP literals and ports) from the client
// namespace every interval; an attempt whose handshake took longer than
// deadline fails. Stop ends it.
func (c *Cluster) ProbeTCP(targets []netip.AddrPort, interval, deadline time.Duration) (*TCPProbe, error) {
	m, err := newSocketMaker(c.Client.Netns)
	if err != nil {
		return nil, err
	}
	p := &TCPProbe{sockets: m, targets: targets, interval: interval, deadline: deadline,
		sent: make([][]time.Time, len(targets)), ok: make([][]bool, len(targets)), stop: make(chan struct{})}
	p.loop.Go(p.run)
	return p, nil
}

func (p *TCPProbe) run() {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	var last time.Time
	for {
		now := time.Now()
		if !last.IsZero() {
			p.mu.Lock()
			p.spacing = max(p.spacing, now.Sub(last))
			p.mu.Unlock()
		}
		last = now
		for i := range p.targets {
			p.mu.Lock()
			seq := len(p.sent[i])
			p.sent[i] = append(p.sent[i], time.Now())
			p.ok[i] = append(p.ok[i], false)
			p.mu.Unlock()
			p.tries.Go(func() { p.try(i, seq) })
		}
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

func (p *TCPProbe) try(i, seq int) {
	if err := p.sockets.connect(p.targets[i], p.deadline); err != nil {
		return
	}
	p.mu.Lock()
	p.ok[i][seq] = true
	p.mu.Unlock()
}

// Stop ends probing and waits for the attempts still out.
func (p *TCPProbe) Stop() {
	select {
	case <-p.stop:
		return
	default:
		close(p.stop)
	}
	p.loop.Wait()
	p.tries.Wait()
	p.sockets.close()
}

// Spacing returns the longest time between two rounds of attempts so far.
func (p *TCPProbe) Spacing() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spacing
}

// Outage returns target i's longest run without a connection among the
// runs that were still going at since or began after it: from the last
// attempt that connected before the run to the first after it (to the last
// attempt sent when none did). A run that began before since counts whole.
// Zero when every attempt from since on connected. Safe while probing.
func (p *TCPProbe) Outage(i int, since time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return LongestGap(p.sent[i], p.ok[i], since)
}

// OutageExcept is Outage less the time the spans cover of each gap (see
// LongestGapExcept).
func (p *TCPProbe) OutageExcept(i int, since time.Time, except []Span) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return LongestGapExcept(p.sent[i], p.ok[i], since, except)
}

// Reachable returns since when target i's attempts have connected without
// a failure in between, counting only attempts whose deadline has passed,
// and false when the last of them failed.
func (p *TCPProbe) Reachable(i int) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := time.Now().Add(-p.deadline)
	var since time.Time
	for k := len(p.sent[i]) - 1; k >= 0; k-- {
		switch {
		case p.sent[i][k].After(done):
		case !p.ok[i][k]:
			return since, !since.IsZero()
		default:
			since = p.sent[i][k]
		}
	}
	return since, !since.IsZero()
}

// WaitSteady waits until every target has answered every attempt for
// steady, for up to limit (or until ctx ends).
func (p *TCPProbe) WaitSteady(ctx context.Context, steady, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var bad []string
		for i, t := range p.targets {
			if since, ok := p.Reachable(i); !ok || time.Since(since) < steady {
				bad = append(bad, t.Addr().String())
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering every attempt for %v within %v", strings.Join(bad, ", "), steady, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LongestGap is the longest time between two answered probes with only
// unanswered ones between them, among the gaps that end at or after since
// (the zero time: all); a run of unanswered probes at the start or the end
// counts from the first or to the last probe sent. With nothing lost it is
// the probe interval.
func LongestGap(sent []time.Time, acked []bool, since time.Time) time.Duration {
	return LongestGapExcept(sent, acked, since, nil)
}

// LongestGapExcept is LongestGap with each gap less the time the spans
// (sorted, disjoint) cover of it: spans in which the machine, not the
// target, kept the client from its answers (see MachineGaps).
func LongestGapExcept(sent []time.Time, acked []bool, since time.Time, except []Span) time.Duration {
	var longest time.Duration
	for _, g := range answerGaps(sent, acked) {
		if !g.End.Before(since) {
			longest = max(longest, g.End.Sub(g.Start)-covered(except, g.Start, g.End))
		}
	}
	return longest
}

// answerGaps are the spans from each answered attempt (the first attempt
// sent, at the start) to the next answered one, with only unanswered
// attempts or none between them, and from the last answered one to the
// last sent when that one went unanswered.
func answerGaps(sent []time.Time, acked []bool) []Span {
	if len(sent) == 0 {
		return nil
	}
	var out []Span
	last := sent[0]
	for i, at := range sent {
		if acked[i] {
			out = append(out, Span{last, at})
			last = at
		}
	}
	if end := sent[len(sent)-1]; !acked[len(sent)-1] {
		out = append(out, Span{last, end})
	}
	return out
}

// Span is a stretch of time, from Start to End.
type Span struct{ Start, End time.Time }

// covered is how much of [from, to] the spans cover (they must not
// overlap each other).
func covered(spans []Span, from, to time.Time) time.Duration {
	var sum time.Duration
	for _, s := range spans {
		start, end := s.Start, s.End
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if end.After(start) {
			sum += end.Sub(start)
		}
	}
	return sum
}

// Gaps returns target i's gaps longer than longer: the spans between two
// answered attempts (or from the last answered one to the last sent) with
// only unanswered attempts, or none at all, between them.
func (p *TCPProbe) Gaps(i int, longer time.Duration) []Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Span
	for _, g := range answerGaps(p.sent[i], p.ok[i]) {
		if g.End.Sub(g.Start) > longer {
			out = append(out, g)
		}
	}
	return out
}

// Answered reports whether any attempt at target i connected.
func (p *TCPProbe) Answered(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.ok[i], true)
}

// MachineGaps returns the spans in which every one of the controls'
// targets that ever answered had a gap longer than longer, when at least
// two did: the controls are addresses that never move (the nodes' own), so
// when two or more of them go unanswered together, the machine or the
// client did not run, and the VIPs' gaps then are not the failover's.
func MachineGaps(controls *TCPProbe, longer time.Duration) []Span {
	var witnesses [][]Span
	for i := range controls.targets {
		if controls.Answered(i) {
			witnesses = append(witnesses, controls.Gaps(i, longer))
		}
	}
	if len(witnesses) < 2 {
		return nil
	}
	common := witnesses[0]
	for _, w := range witnesses[1:] {
		var next []Span
		for _, a := range common {
			for _, b := range w {
				start, end := a.Start, a.End
				if b.Start.After(start) {
					start = b.Start
				}
				if b.End.Before(end) {
					end = b.End
				}
				if end.After(start) {
					next = append(next, Span{start, end})
				}
			}
		}
		common = next
	}
	return common
}
