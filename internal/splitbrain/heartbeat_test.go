package splitbrain

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/config"
)

// A heartbeat parses as a VRRPv3 advert of router id 0 without an address,
// its checksum verifies over the IPv4 pseudo-header, and nothing else is
// one.
func TestHeartbeatPacket(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")
	b := heartbeatPacket(src, dst)
	a, err := parseAdvert(b, false)
	if err != nil {
		t.Fatal(err)
	}
	if a.version != 3 || a.vrid != 0 || a.priority != 0 || len(a.addrs) != 0 || a.interval != heartbeatEvery {
		t.Errorf("parsed %+v", a)
	}
	s4, d4 := src.As4(), dst.As4()
	pseudo := append(append(append([]byte{}, s4[:]...), d4[:]...), 0, 112, 0, byte(len(b)))
	var sum uint32
	for _, w := range [][]byte{pseudo, b} {
		for i := 0; i+1 < len(w); i += 2 {
			sum += uint32(w[i])<<8 | uint32(w[i+1])
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("the checksum does not verify: %#x", sum)
	}
	if !isHeartbeat(b) {
		t.Error("isHeartbeat(heartbeat) = false")
	}
	_, v2, _ := ipPayload(t, capturedAdverts(t)["v2-multicast"])
	if isHeartbeat(v2) {
		t.Error("isHeartbeat(an advert) = true")
	}
}

// A peer is silent once no heartbeat arrived for heartbeatSilent since it
// became one or since its last heartbeat; a heartbeat ends it; a peer no
// longer listed is forgotten.
func TestHeartbeats(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	a, b := netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.13")
	h := newHeartbeats()
	h.setPeers([]netip.Addr{a, b}, t0)
	h.heard(a, t0.Add(time.Second))
	if fell := h.silences(t0.Add(heartbeatSilent - time.Millisecond)); len(fell) != 0 {
		t.Errorf("silent before %s: %+v", heartbeatSilent, fell)
	}
	fell := h.silences(t0.Add(heartbeatSilent))
	if len(fell) != 1 || fell[0].Addr != b || !fell[0].Last.IsZero() {
		t.Errorf("fell silent %+v, want %s, never heard", fell, b)
	}
	if fell := h.silences(t0.Add(heartbeatSilent + time.Second)); len(fell) != 1 || fell[0].Addr != a {
		t.Errorf("fell silent %+v, want %s once", fell, a)
	}
	if fell := h.silences(t0.Add(10 * time.Second)); len(fell) != 0 {
		t.Errorf("fell silent again: %+v", fell)
	}
	if !h.heard(b, t0.Add(11*time.Second)) {
		t.Error("heard: a silent peer was not silent")
	}
	h.heard(netip.MustParseAddr("192.0.2.99"), t0)
	h.setPeers([]netip.Addr{b}, t0.Add(12*time.Second))
	got := h.snapshot()
	if len(got) != 1 || got[0].Addr != b || got[0].Silent || !got[0].Last.Equal(t0.Add(11*time.Second)) {
		t.Errorf("snapshot %+v", got)
	}
}

// TestGuardHeartbeats: the guard sends each unicast peer a heartbeat as it
// starts and every heartbeatEvery, and notes the heartbeats of the peers
// that send them.
func TestGuardHeartbeats(t *testing.T) {
	raw := config.Raw{VirtualIPs: "192.0.2.100", PeersFrom: config.PeersFromPods, PodName: "a"}
	gt := newGuardTest(t, raw, "192.0.2.11/24")
	p := testPlanWith(t, raw, "192.0.2.11/24", "192.0.2.12", "192.0.2.13")
	p.Fleet.Heartbeats = []netip.Addr{netip.MustParseAddr("192.0.2.12")}
	gt.g.Replan(p)
	gt.waitFor("heartbeats to both peers", func() bool {
		gt.vrrp4.mu.Lock()
		defer gt.vrrp4.mu.Unlock()
		n := 0
		for _, b := range gt.vrrp4.written {
			if isHeartbeat(b) {
				n++
			}
		}
		return n >= 2
	})
	gt.vrrp4.in <- packetIn{b: heartbeatPacket(netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.11")), from: &net.IPAddr{IP: net.ParseIP("192.0.2.12")}}
	gt.waitFor("the peer heard", func() bool {
		ps := gt.g.Snapshot().Peers
		return len(ps) == 1 && !ps[0].Last.IsZero()
	})
	if f := gt.g.Snapshot().Foreign; len(f) != 0 {
		t.Errorf("a heartbeat counted as foreign: %+v", f)
	}
}

// TestTakeoverCauses: what the last advert of another node says of a
// takeover, and what keepalived's next state says of a release; a takeover
// is told once announced, or announceWait after it.
func TestTakeoverCauses(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v3 := func(priority byte) []byte { return []byte{0x31, 11, priority, 1, 0, 20, 0, 0, 192, 0, 2, 100} }
	peer := netip.MustParseAddr("192.0.2.12")
	for _, tt := range []struct {
		name   string
		advert []byte // nil: none heard
		since  time.Duration
		want   string
	}{
		{"nobody heard", nil, 0, CauseStart},
		{"a goodbye", v3(0), 50 * time.Millisecond, CauseHandover},
		{"silent for the master-down interval", v3(200), 600 * time.Millisecond, CauseSilent},
		{"still heard", v3(200), 100 * time.Millisecond, CausePreemption},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock, tk, told := backupSince(t0)
			at := t0.Add(time.Second)
			if tt.advert != nil {
				clock.heard(tt.advert, peer, false, at.Add(-tt.since))
			}
			tk.note(at, "X", "MASTER")
			toldAt(t, tk, told, at.Add(announceWait))
			got := *told
			if len(got) != 1 || got[0].Cause != tt.want || !got[0].Announced.IsZero() {
				t.Fatalf("told %+v, want one, %s, not announced", got, tt.want)
			}
		})
	}
	// Released: to FAULT, to STOP, to BACKUP for a higher priority.
	clock := newAdvertClock()
	var rel []Release
	tk := newTakeovers(clock, nil, func(r Release) { rel = append(rel, r) })
	tk.replan(map[string]key{"X": {vrid: 11}}, nil, map[string]int{"X": 100})
	for _, s := range []string{"MASTER", "FAULT", "MASTER", "STOP", "MASTER"} {
		tk.note(t0, "X", s)
	}
	clock.heard(v3(200), peer, false, t0)
	tk.note(t0, "X", "BACKUP")
	var causes []string
	for _, r := range rel {
		causes = append(causes, r.Cause+" "+r.To.String())
	}
	if want := "[fault invalid IP stop invalid IP higher-priority 192.0.2.12]"; fmt.Sprint(causes) != want {
		t.Errorf("releases %v, want %s", causes, want)
	}
	// An announcement ends the wait, clockSettle after keepalived's line.
	var got []Takeover
	tk = newTakeovers(newAdvertClock(), func(x Takeover) { got = append(got, x) }, nil)
	tk.replan(map[string]key{"X": {vrid: 11}}, nil, nil)
	tk.note(t0, "X", "MASTER")
	tk.announced("X", t0.Add(-10*time.Millisecond))
	tk.announced("X", t0.Add(10*time.Millisecond))
	toldAt(t, tk, &got, t0.Add(clockSettle))
	if len(got) != 1 || !got[0].Announced.Equal(t0.Add(-10*time.Millisecond)) {
		t.Errorf("told %+v, want one announced 10 ms before keepalived's line", got)
	}
	// The announcement read before keepalived's line: the takeover's, told
	// clockSettle after the line. One long before the line, or while
	// MASTER, is not.
	got = nil
	tk = newTakeovers(newAdvertClock(), func(x Takeover) { got = append(got, x) }, nil)
	tk.replan(map[string]key{"X": {vrid: 11}}, nil, nil)
	tk.note(t0, "X", "BACKUP")
	tk.announced("X", t0.Add(time.Second))
	tk.announced("X", t0.Add(time.Second+time.Millisecond))
	tk.note(t0.Add(time.Second+20*time.Millisecond), "X", "MASTER")
	tk.due(t0.Add(time.Second + 20*time.Millisecond + clockSettle))
	if len(got) != 1 || !got[0].Announced.Equal(t0.Add(time.Second)) {
		t.Errorf("told %+v, want one announced 20 ms before keepalived's line as read", got)
	}
	tk.announced("X", t0.Add(2*time.Second)) // while MASTER: keepalived's refresh
	tk.note(t0.Add(3*time.Second), "X", "BACKUP")
	tk.announced("X", t0.Add(4*time.Second))
	tk.note(t0.Add(4*time.Second+earlyWindow+time.Millisecond), "X", "MASTER")
	if len(got) != 1 {
		t.Errorf("told %+v at once, want the second takeover pending: its announcement came too early", got)
	}
	tk.due(t0.Add(10 * time.Second))
	if len(got) != 2 || !got[1].Announced.IsZero() {
		t.Errorf("told %+v, want the second without an announcement", got)
	}
}

// backupSince is the takeovers of a keepalived started at t0 whose
// instance X (router id 11, 192.0.2.100, priority 100) is BACKUP, with its
// clock and what it told.
func backupSince(t0 time.Time) (*advertClock, *takeovers, *[]Takeover) {
	clock := newAdvertClock()
	var got []Takeover
	tk := newTakeovers(clock, func(x Takeover) { got = append(got, x) }, nil)
	tk.replan(map[string]key{"X": {vrid: 11}}, map[string][]netip.Addr{"X": {netip.MustParseAddr("192.0.2.100")}}, map[string]int{"X": 100})
	tk.restart(t0)
	tk.note(t0, "X", "BACKUP")
	return clock, tk, &got
}

// toldAt checks that the one pending takeover of tk is due at, and told
// then, not a moment before (got is what tk told).
func toldAt(t *testing.T, tk *takeovers, got *[]Takeover, at time.Time) {
	t.Helper()
	if n, ok := tk.next(); !ok || !n.Equal(at) {
		t.Errorf("next %v, %v; want %v", n, ok, at)
	}
	tk.due(at.Add(-time.Millisecond))
	if len(*got) != 0 {
		t.Fatalf("told before it was due: %+v", *got)
	}
	tk.due(at)
}

// TestTakeoverGoodbyeReadLate: the old master's goodbye (priority 0)
// arrived before keepalived's MASTER line but its reader, behind on a
// loaded node, noted it after the loop read the line. The takeover is
// told as a handover timed by the goodbye's arrival; a goodbye that
// arrived after the line, or from another node, changes nothing.
func TestTakeoverGoodbyeReadLate(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v3 := func(priority byte) []byte { return []byte{0x31, 11, priority, 1, 0, 20, 0, 0, 192, 0, 2, 100} }
	old, other := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.13")
	for _, tt := range []struct {
		name     string
		from     netip.Addr
		byeAt    time.Duration // from the line
		want     string
		wantLast time.Duration
	}{
		{"arrived before the line", old, -10 * time.Millisecond, CauseHandover, -10 * time.Millisecond},
		{"arrived as the line was read", old, 0, CauseHandover, 0},
		{"arrived after the line", old, time.Millisecond, CausePreemption, -110 * time.Millisecond},
		{"from another node", other, -10 * time.Millisecond, CausePreemption, -110 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock, tk, told := backupSince(t0)
			at := t0.Add(time.Second)
			clock.heard(v3(200), old, false, at.Add(-110*time.Millisecond))
			tk.note(at, "X", "MASTER")
			tk.announced("X", at)
			clock.heard(v3(0), tt.from, false, at.Add(tt.byeAt))
			tk.due(at.Add(clockSettle))
			got := *told
			if len(got) != 1 {
				t.Fatalf("told %+v, want one", got)
			}
			if got[0].Cause != tt.want || got[0].From != old || !got[0].LastAdvert.Equal(at.Add(tt.wantLast)) {
				t.Errorf("told %s from %s, last advert %s before the line; want %s from %s, %s",
					got[0].Cause, got[0].From, at.Sub(got[0].LastAdvert), tt.want, old, -tt.wantLast)
			}
		})
	}
}

// TestTakeoverRacingBackup: when the master dies, two backups of close
// priorities may both become master; this node may hear the other's first
// advert before its own MASTER line. The takeover is the dead master's
// (silent, from it), not a preemption of the other backup; a node heard
// for longer than two intervals is the master taken from.
func TestTakeoverRacingBackup(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v3 := func(priority byte) []byte { return []byte{0x31, 11, priority, 1, 0, 20, 0, 0, 192, 0, 2, 100} }
	dead, racer := netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.13")
	for _, tt := range []struct {
		name      string
		racerFor  time.Duration
		wantCause string
		wantFrom  netip.Addr
	}{
		{"a backup racing", 0, CauseSilent, dead},
		{"a master for a second", time.Second, CausePreemption, racer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock, tk, told := backupSince(t0)
			at := t0.Add(5 * time.Second)
			for d := 2 * time.Second; d >= 610*time.Millisecond; d -= 200 * time.Millisecond {
				clock.heard(v3(200), dead, false, at.Add(-d-tt.racerFor))
			}
			for d := tt.racerFor; d >= 0; d -= 200 * time.Millisecond {
				clock.heard(v3(99), racer, false, at.Add(-d-2*time.Millisecond))
			}
			tk.note(at, "X", "MASTER")
			tk.due(at.Add(announceWait))
			got := *told
			if len(got) != 1 || got[0].Cause != tt.wantCause || got[0].From != tt.wantFrom {
				t.Fatalf("told %+v, want one, %s from %s", got, tt.wantCause, tt.wantFrom)
			}
		})
	}
}
