package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Probe is one TCP request of the client to a VIP.
type Probe struct {
	// Sent is when the probe began to connect; Done when it got its
	// answer or gave up.
	Sent, Done time.Time
	// OK is set when the service answered within the deadline.
	OK bool
	// Node is the name the service answered with: which node holds the
	// VIP, as the client sees it.
	Node string
	// Err says why a probe failed: refused, timeout, unreachable, reset,
	// or the error's text.
	Err string
}

// Dialer connects from the client's network namespace.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// Prober probes every target every interval, each probe a new TCP
// connection that sends an HTTP/1.0 request and reads the node's name from
// the answer. A probe that has no answer after deadline fails.
type Prober struct {
	dial     Dialer
	targets  []netip.AddrPort
	interval time.Duration
	deadline time.Duration

	mu     sync.Mutex
	probes [][]Probe
	// stalls are the gaps between rounds of a target's probes longer
	// than StallAfter intervals.
	stalls []Interval

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartProber starts probing.
func StartProber(ctx context.Context, dial Dialer, targets []netip.AddrPort, interval, deadline time.Duration) *Prober {
	ctx, cancel := context.WithCancel(ctx)
	p := &Prober{dial: dial, targets: targets, interval: interval, deadline: deadline,
		probes: make([][]Probe, len(targets)), cancel: cancel}
	for i := range targets {
		p.wg.Go(func() { p.run(ctx, i) })
	}
	return p
}

// StallAfter is how many probe intervals may pass between two rounds of a
// target's probes before the client counts as stalled: a harness the
// machine did not run for that long, whose probes in flight may have timed
// out for it, not for the VIP.
const StallAfter = 5

func (p *Prober) run(ctx context.Context, i int) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	var inflight sync.WaitGroup
	defer inflight.Wait()
	last := time.Now()
	for {
		now := time.Now()
		if now.Sub(last) > StallAfter*p.interval {
			p.mu.Lock()
			p.stalls = append(p.stalls, Interval{last, now})
			p.mu.Unlock()
		}
		last = now
		inflight.Go(func() {
			pr := p.probe(ctx, p.targets[i])
			if ctx.Err() != nil && !pr.OK {
				return // cut short by Stop: no verdict on the VIP
			}
			p.mu.Lock()
			p.probes[i] = append(p.probes[i], pr)
			p.mu.Unlock()
		})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// request is what a probe sends: the smallest HTTP request a server
// answers.
const request = "GET / HTTP/1.0\r\n\r\n"

func (p *Prober) probe(ctx context.Context, to netip.AddrPort) Probe {
	pr := Probe{Sent: time.Now()}
	ctx, cancel := context.WithDeadline(ctx, pr.Sent.Add(p.deadline))
	defer cancel()
	conn, err := p.dial(ctx, "tcp", to.String())
	if err == nil {
		defer conn.Close()
		_ = conn.SetDeadline(pr.Sent.Add(p.deadline))
		var b []byte
		if _, err = io.WriteString(conn, request); err == nil {
			b, err = io.ReadAll(io.LimitReader(conn, 4096))
		}
		if err == nil {
			pr.Node = answer(b)
			if pr.Node == "" {
				err = errors.New("no name in the answer")
			}
		}
	}
	pr.Done = time.Now()
	pr.OK = err == nil
	if err != nil {
		pr.Err = reason(err)
	}
	return pr
}

// answer is the body of an HTTP answer, trimmed: the node's name.
func answer(b []byte) string {
	s := string(b)
	if !strings.HasPrefix(s, "HTTP/1.") || !strings.Contains(s, " 200 ") {
		return ""
	}
	_, body, ok := strings.Cut(s, "\r\n\r\n")
	if !ok {
		return ""
	}
	return strings.TrimSpace(body)
}

// reason names a probe's failure in a word where there is one.
func reason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

// Stop ends probing, waits for the probes in flight and returns every
// target's probes in the order they were sent.
func (p *Prober) Stop() [][]Probe {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]Probe, len(p.probes))
	for i, ps := range p.probes {
		out[i] = sortBySent(ps)
	}
	return out
}

// Stalls returns the spans in which the client was stalled: the gaps
// longer than StallAfter intervals between two rounds of any target's
// probes, joined where they overlap.
func (p *Prober) Stalls() []Interval {
	p.mu.Lock()
	defer p.mu.Unlock()
	return merge(p.stalls)
}

// Since returns target i's probes sent at or after t, for progress lines.
func (p *Prober) Since(i int, t time.Time) []Probe {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Probe
	for _, pr := range p.probes[i] {
		if !pr.Sent.Before(t) {
			out = append(out, pr)
		}
	}
	// Probes are kept in the order they ended.
	return sortBySent(out)
}
