package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// ProbePort is the UDP port of the nodes' echo servers that the rollout
// probes reach through the VIPs.
const ProbePort = 7070

// probeDeadline is how soon an answer must come to count. The kernel
// queues datagrams to an address whose neighbour is not resolved yet and
// sends them once it is: an answer that late shows the VIP came back, not
// that it was there when the probe left.
const probeDeadline = 50 * time.Millisecond

// Echo answers every UDP datagram on pc with the same bytes, until pc is
// closed. A node runs one on 0.0.0.0: whichever node holds a VIP answers
// for it.
func Echo(pc net.PacketConn) {
	buf := make([]byte, 64)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(buf[:n], from)
	}
}

// ListenPacketIn opens a UDP socket on address in the named network
// namespace; it stays there afterwards.
func ListenPacketIn(netnsName, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := lab.InNetns(netnsName, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", address)
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return nil, fmt.Errorf("listening on udp %s in %s: %w", address, netnsName, err)
	}
	return pc, nil
}

// Prober sends a numbered datagram to every target every interval from one
// socket and notes which come back within probeDeadline: the client's view
// of each VIP, at the interval's resolution.
type Prober struct {
	pc       net.PacketConn
	targets  []netip.AddrPort
	interval time.Duration

	mu    sync.Mutex
	sent  [][]time.Time // per target, by sequence number
	acked [][]bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// NewProber probes targets from pc every interval once started.
func NewProber(pc net.PacketConn, targets []netip.AddrPort, interval time.Duration) *Prober {
	return &Prober{pc: pc, targets: targets, interval: interval,
		sent: make([][]time.Time, len(targets)), acked: make([][]bool, len(targets)), stop: make(chan struct{})}
}

// Start begins probing.
func (p *Prober) Start() {
	p.wg.Go(p.receive)
	p.wg.Go(p.send)
}

// payload is the target's index and the probe's sequence number.
func payload(target, seq int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, uint32(target))
	binary.BigEndian.PutUint32(b[4:], uint32(seq))
	return b
}

func (p *Prober) send() {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		for i, to := range p.targets {
			p.mu.Lock()
			seq := len(p.sent[i])
			p.sent[i] = append(p.sent[i], time.Now())
			p.acked[i] = append(p.acked[i], false)
			p.mu.Unlock()
			// A VIP nobody holds has no neighbour entry: the send may
			// fail, which is a lost probe like any other.
			_, _ = p.pc.WriteTo(payload(i, seq), net.UDPAddrFromAddrPort(to))
		}
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

func (p *Prober) receive() {
	buf := make([]byte, 64)
	for {
		n, _, err := p.pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || n != 8 {
			continue
		}
		now := time.Now()
		i, seq := int(binary.BigEndian.Uint32(buf)), int(binary.BigEndian.Uint32(buf[4:]))
		p.mu.Lock()
		if i < len(p.acked) && seq < len(p.acked[i]) && now.Sub(p.sent[i][seq]) <= probeDeadline {
			p.acked[i][seq] = true
		}
		p.mu.Unlock()
	}
}

// FirstAnswers returns, per target, when the first probe sent at or after
// since that was answered left (the zero time: none yet). It works during
// probing and after Stop.
func (p *Prober) FirstAnswers(since time.Time) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]time.Time, len(p.targets))
	for i, sent := range p.sent {
		from, _ := slices.BinarySearchFunc(sent, since, time.Time.Compare)
		for j := from; j < len(sent); j++ {
			if p.acked[i][j] {
				out[i] = sent[j]
				break
			}
		}
	}
	return out
}

// Recovered returns, per target, when the answered probe that ended the
// longest run of unanswered ones sent at or after since left: when the
// target answered again after its outage (the zero time: no probe after
// since went unanswered, or none answered after the run yet). It works
// during probing and after Stop.
func (p *Prober) Recovered(since time.Time) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]time.Time, len(p.targets))
	for i, sent := range p.sent {
		from, _ := slices.BinarySearchFunc(sent, since, time.Time.Compare)
		longest, run := 0, 0
		for j := from; j < len(sent); j++ {
			if !p.acked[i][j] {
				run++
				continue
			}
			if run > longest {
				longest, out[i] = run, sent[j]
			}
			run = 0
		}
	}
	return out
}

// Stop ends probing, waits grace for late answers, closes the socket and
// returns, per target, the longest gap: the time from the last answered
// probe before a run of unanswered ones to the first answered after it
// (one interval when nothing was lost). Probes still unanswered at the end
// count as a gap up to the last probe sent.
func (p *Prober) Stop(ctx context.Context, grace time.Duration) []time.Duration {
	close(p.stop)
	_ = sleep(ctx, grace)
	p.pc.Close()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]time.Duration, len(p.targets))
	for i := range p.targets {
		out[i] = lab.LongestGap(p.sent[i], p.acked[i], time.Time{})
	}
	return out
}
