package lab

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// ProbeDeadline is how soon a probe's connection must be accepted to count.
// A SYN to a VIP that nobody holds, or whose holder the client's ARP cache
// does not know yet, is retransmitted a second later: a connection that
// late shows the VIP came back, not that it was there when the probe left.
const ProbeDeadline = 50 * time.Millisecond

// Prober is a client of the VIPs as a user sees them: from the client
// namespace it opens a TCP connection to every target every interval, each
// connect on its own with ProbeDeadline, and notes which were accepted.
// Whatever node holds a target's address answers, when it serves the port
// (a Service on 0.0.0.0). It stops by itself after its limit.
type Prober struct {
	client   *Node
	targets  []netip.AddrPort
	interval time.Duration
	limit    time.Duration

	mu    sync.Mutex
	sent  [][]time.Time // per target, by probe
	acked [][]bool

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// NewProber probes targets from the client namespace every interval, for
// at most limit, once started.
func (c *Cluster) NewProber(targets []netip.AddrPort, interval, limit time.Duration) *Prober {
	return &Prober{client: c.Client, targets: targets, interval: interval, limit: limit,
		sent: make([][]time.Time, len(targets)), acked: make([][]bool, len(targets)), stop: make(chan struct{})}
}

// Start begins probing.
func (p *Prober) Start() {
	p.wg.Go(p.run)
}

func (p *Prober) run() {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	end := time.NewTimer(p.limit)
	defer end.Stop()
	for {
		for i, to := range p.targets {
			p.mu.Lock()
			seq := len(p.sent[i])
			p.sent[i] = append(p.sent[i], time.Now())
			p.acked[i] = append(p.acked[i], false)
			p.mu.Unlock()
			p.wg.Go(func() { p.probe(i, seq, to) })
		}
		select {
		case <-p.stop:
			return
		case <-end.C:
			return
		case <-t.C:
		}
	}
}

// probe connects once; an accepted connection within the deadline counts.
func (p *Prober) probe(i, seq int, to netip.AddrPort) {
	ctx, cancel := context.WithTimeout(context.Background(), ProbeDeadline)
	defer cancel()
	conn, err := p.client.Dial(ctx, "tcp", to.String())
	if err != nil {
		return
	}
	conn.Close()
	p.mu.Lock()
	p.acked[i][seq] = true
	p.mu.Unlock()
}

// Stop ends probing, waits for the probes under way and returns, per
// target, the longest gap (LongestGap).
func (p *Prober) Stop() []time.Duration {
	p.stopOnce.Do(func() { close(p.stop) })
	p.wg.Wait()
	return p.Gaps()
}

// Gaps returns each target's longest gap so far; probes still under way
// count as unanswered.
func (p *Prober) Gaps() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]time.Duration, len(p.targets))
	for i := range p.targets {
		out[i] = LongestGap(p.sent[i], p.acked[i])
	}
	return out
}

// Answered reports whether the last probe of every target that has
// finished was answered: every target serves now.
func (p *Prober) Answered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.targets {
		// The newest probe may still be under way: look one further
		// back, where ProbeDeadline has passed.
		k := len(p.acked[i]) - 1
		for k >= 0 && time.Since(p.sent[i][k]) < ProbeDeadline+p.interval {
			k--
		}
		if k < 0 || !p.acked[i][k] {
			return false
		}
	}
	return true
}

// LongestGap is the longest time between two answered probes with only
// unanswered ones between them; a run of unanswered probes at the start or
// the end counts from the first or to the last probe sent.
func LongestGap(sent []time.Time, acked []bool) time.Duration {
	if len(sent) == 0 {
		return 0
	}
	var longest time.Duration
	last := sent[0]
	for i, at := range sent {
		if !acked[i] {
			continue
		}
		longest = max(longest, at.Sub(last))
		last = at
	}
	if !acked[len(sent)-1] {
		longest = max(longest, sent[len(sent)-1].Sub(last))
	}
	return longest
}
