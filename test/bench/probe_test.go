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
	began := time.Now()
	p.Start()
	// flaky answers after 200 ms only.
	time.Sleep(200 * time.Millisecond)
	go Echo(flaky)
	defer flaky.Close()
	back := time.Now()
	time.Sleep(200 * time.Millisecond)
	gaps := p.Stop(context.Background(), 50*time.Millisecond)
	first := p.FirstAnswers(back)
	if d := first[0].Sub(back); first[0].IsZero() || d > 50*time.Millisecond {
		t.Errorf("the steady target's first answer %v after %v, want within a few intervals", d, back)
	}
	if first[1].IsZero() || first[1].Before(back) {
		t.Errorf("the flaky target's first answer after it came back: %v (came back %v)", first[1], back)
	}
	if got := p.FirstAnswers(time.Now().Add(time.Hour)); !got[0].IsZero() || !got[1].IsZero() {
		t.Errorf("answers to probes not sent yet: %v", got)
	}
	// The flaky target came back between its longest run of unanswered
	// probes and now.
	rec := p.Recovered(began)
	if rec[1].IsZero() || rec[1].Before(back.Add(-probeDeadline-10*time.Millisecond)) || rec[1].After(back.Add(50*time.Millisecond)) {
		t.Errorf("the flaky target recovered at %v, want about %v", rec[1], back)
	}
	if gaps[0] > 100*time.Millisecond {
		t.Errorf("the steady target's longest gap %v, want about the 5 ms interval", gaps[0])
	}
	// The probes of its last probeDeadline away were queued in its socket
	// and answered in time when it came back.
	if want := 200*time.Millisecond - probeDeadline - 10*time.Millisecond; gaps[1] < want {
		t.Errorf("the flaky target's longest gap %v, want at least %v of the 200 ms it was away", gaps[1], want)
	}
}

// TestParseCounters reads the two counters of `nft -j list counters`.
func TestParseCounters(t *testing.T) {
	in, out, err := parseCounters([]byte(`{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
		{"counter": {"family": "inet", "name": "vrrp_in", "table": "bench_vrrp_count", "handle": 1, "packets": 1234, "bytes": 49360}},
		{"counter": {"family": "inet", "name": "vrrp_out", "table": "bench_vrrp_count", "handle": 2, "packets": 56, "bytes": 2240}}]}`))
	if err != nil || in != 1234 || out != 56 {
		t.Errorf("parseCounters = %d, %d, %v; want 1234, 56, nil", in, out, err)
	}
	if _, _, err := parseCounters([]byte(`{"nftables": [{"metainfo": {}}]}`)); err == nil {
		t.Error("parseCounters of no counters: no error")
	}
}

// TestParseRawDrops sums the drops of the protocol-112 sockets only.
func TestParseRawDrops(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
 113: 00000000:0070 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6764933 2 0000000001758239 7
 113: 0C0200C0:0070 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6764932 2 0000000070442a9b 5
   1: 00000000:0001 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6743742 2 000000001d4a88b2 100
`
	if n, err := parseRawDrops(table); err != nil || n != 12 {
		t.Errorf("parseRawDrops = %d, %v; want 12, nil", n, err)
	}
}
