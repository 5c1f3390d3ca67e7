package bench

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestProberSeesAGap: a prober on loopback against an echo server that is
// away for a while reports a gap about that long for its target, and about
// the interval for a target that always answers.
func TestProberSeesAGap(t *testing.T) {
	listen := func() net.PacketConn {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return pc
	}
	steady, flaky := listen(), listen()
	go Echo(steady)
	defer steady.Close()
	client := listen()
	targets := []netip.AddrPort{
		netip.MustParseAddrPort(steady.LocalAddr().String()),
		netip.MustParseAddrPort(flaky.LocalAddr().String()),
	}
	p := NewProber(client, targets, 5*time.Millisecond)
	p.Start()
	// flaky answers after 200 ms only.
	time.Sleep(200 * time.Millisecond)
	go Echo(flaky)
	defer flaky.Close()
	time.Sleep(200 * time.Millisecond)
	gaps := p.Stop(context.Background(), 50*time.Millisecond)
	if gaps[0] > 100*time.Millisecond {
		t.Errorf("the steady target's longest gap %v, want about the 5 ms interval", gaps[0])
	}
	// The probes of its last probeDeadline away were queued in its socket
	// and answered in time when it came back.
	if want := 200*time.Millisecond - probeDeadline - 10*time.Millisecond; gaps[1] < want {
		t.Errorf("the flaky target's longest gap %v, want at least %v of the 200 ms it was away", gaps[1], want)
	}
}
