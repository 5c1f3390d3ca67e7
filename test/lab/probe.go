package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ProbeDeadline is how soon a probe's connection must be accepted to count,
// by the kernel's clock: the handshake's round trip, from the SYN leaving
// TCP to the SYN-ACK. A SYN to a VIP that nobody holds waits for ARP (and
// is sent, late, once the new holder announces itself) or is retransmitted
// a second later: a connection that late shows the VIP came back, not that
// it was there when the probe left. Timing by the kernel keeps a busy
// machine, where the prober's goroutines run late, from counting answers
// that came in time as lost.
const ProbeDeadline = 50 * time.Millisecond

// probeTimeout bounds one probe's connect.
const probeTimeout = time.Second

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
	// spacing is the longest time between two rounds of probes: the
	// client's own delays on a busy machine, which lengthen every gap.
	spacing time.Duration

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
	var last time.Time
	for {
		now := time.Now()
		if !last.IsZero() {
			p.mu.Lock()
			p.spacing = max(p.spacing, now.Sub(last))
			p.mu.Unlock()
		}
		last = now
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

// probe connects once; a connection whose handshake took at most
// ProbeDeadline, with no SYN sent twice, counts.
func (p *Prober) probe(i, seq int, to netip.AddrPort) {
	rtt, err := connectRTT(p.client.Netns, to, probeTimeout)
	if err != nil || rtt > ProbeDeadline {
		return
	}
	p.mu.Lock()
	p.acked[i][seq] = true
	p.mu.Unlock()
}

// connectRTT opens a TCP connection to addr from the named network
// namespace, closes it, and returns the handshake's round trip as the
// kernel measured it. A handshake whose SYN was sent again has no round
// trip worth the name: it is an error. Only the socket is made in the
// namespace (a socket stays in the namespace it was made in): the wait
// ties up no thread.
func connectRTT(netns string, addr netip.AddrPort, timeout time.Duration) (time.Duration, error) {
	family, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()})
	if addr.Addr().Is6() {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	}
	var fd int
	err := InNetns(netns, func() error {
		var err error
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("a socket in %s: %w", netns, err)
	}
	// Non-blocking: the runtime's poller waits for the connect.
	f := os.NewFile(uintptr(fd), "probe")
	defer f.Close()
	if err := f.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return 0, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var connErr error
	waited := false
	werr := rc.Write(func(fd uintptr) bool {
		if !waited {
			waited = true
			return false // wait until writable: connected or failed
		}
		if soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); err != nil {
			connErr = err
		} else if soErr != 0 {
			connErr = unix.Errno(soErr)
		} else {
			info, connErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}
		return true
	})
	if werr != nil {
		return 0, werr
	}
	if connErr != nil {
		return 0, connErr
	}
	if info.Total_retrans > 0 {
		return 0, fmt.Errorf("connecting to %s: the SYN was sent %d more times", addr, info.Total_retrans)
	}
	return time.Duration(info.Rtt) * time.Microsecond, nil
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

// Spacing returns the longest time between two rounds of probes so far
// (the interval, unless the prober itself ran late).
func (p *Prober) Spacing() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spacing
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
