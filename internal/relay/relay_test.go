package relay

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host/hosttest"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// TestAdvertV2: a VRRPv2 advert decodes as gopacket decodes VRRPv2 (RFC
// 3768), with a valid checksum.
func TestAdvertV2(t *testing.T) {
	a := advert{version: 2, vrid: 11, priority: Priority, interval: time.Second,
		vips: []netip.Addr{netip.MustParseAddr("192.0.2.101"), netip.MustParseAddr("192.0.2.100")}}
	copy(a.auth[:], "OpenShift-IPFailover")
	b, err := a.marshal(netip.MustParseAddr("192.0.2.13"), group4)
	if err != nil {
		t.Fatal(err)
	}
	p := gopacket.NewPacket(b, layers.LayerTypeVRRP, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatal(el.Error())
	}
	v, ok := p.Layer(layers.LayerTypeVRRP).(*layers.VRRPv2)
	if !ok {
		t.Fatalf("not VRRPv2: %v", p)
	}
	got := fmt.Sprintf("v%d type %d vrid %d priority %d count %d auth %d interval %d addrs %v",
		v.Version, v.Type, v.VirtualRtrID, v.Priority, v.CountIPAddr, v.AuthType, v.AdverInt, v.IPAddress)
	want := "v2 type 1 vrid 11 priority 255 count 2 auth 1 interval 1 addrs [192.0.2.101 192.0.2.100]"
	if got != want {
		t.Errorf("decoded %s, want %s", got, want)
	}
	if string(b[len(b)-8:]) != "OpenShif" {
		t.Errorf("authentication data %q, want the first 8 bytes of the password", b[len(b)-8:])
	}
	if checksum(b, 0) != 0 {
		t.Errorf("checksum does not verify")
	}
}

// TestAdvertV3: VRRPv3 over IPv4 carries the interval in centiseconds and a
// checksum over the pseudo-header; over IPv6 the kernel fills the checksum.
func TestAdvertV3(t *testing.T) {
	src := netip.MustParseAddr("192.0.2.13")
	a := advert{version: 3, vrid: 12, priority: Priority, interval: 100 * time.Millisecond, vips: []netip.Addr{netip.MustParseAddr("192.0.2.100")}}
	b, err := a.marshal(src, group4)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0x31 || binary.BigEndian.Uint16(b[4:6]) != 10 || len(b) != 12 {
		t.Errorf("header % x", b)
	}
	s4, d4 := src.As4(), group4.As4()
	pseudo := append(append(append([]byte{}, s4[:]...), d4[:]...), 0, 112, 0, byte(len(b)))
	if checksum(append(pseudo, b...), 0) != 0 {
		t.Errorf("the checksum does not verify over the pseudo-header")
	}
	a6 := advert{version: 3, vrid: 12, priority: Priority, interval: time.Second, vips: []netip.Addr{netip.MustParseAddr("2001:db8::100")}}
	b, err = a6.marshal(netip.Addr{}, group6)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 24 || binary.BigEndian.Uint16(b[4:6]) != 100 || binary.BigEndian.Uint16(b[6:8]) != 0 {
		t.Errorf("IPv6 advert % x", b)
	}
	for _, bad := range []advert{
		{version: 2, vrid: 1, interval: 1500 * time.Millisecond, vips: a.vips},
		{version: 2, vrid: 1, interval: time.Second, vips: a6.vips},
		{version: 3, vrid: 1, interval: time.Minute, vips: a.vips},
		{version: 3, vrid: 1, interval: time.Second},
	} {
		if _, err := bad.marshal(src, group4); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// fakeSender records what it sends.
type fakeSender struct {
	mu     sync.Mutex
	sent   []string
	closed bool
}

func (f *fakeSender) send(b []byte, to netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, fmt.Sprintf("v%d vrid %d prio %d to %s", b[0]>>4, b[1], b[2], to))
	return nil
}

func (f *fakeSender) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

type fakeKeepalived struct{ pid atomic.Int32 }

func (k *fakeKeepalived) PID() int { return int(k.pid.Load()) }

// testPlan plans vips on a node at .13 with the peers from the pods: the
// one other pod at .11 unless alone.
func testPlan(t *testing.T, vips, source string, alone ...bool) *plan.Plan {
	t.Helper()
	cfg, err := config.Parse(config.Raw{VirtualIPs: vips, PeersFrom: config.PeersFromPods, PodName: "a", UnicastSource: source})
	if err != nil {
		t.Fatal(err)
	}
	h := hosttest.New(map[string][]netip.Prefix{"eth0": {netip.MustParsePrefix("192.0.2.13/24"), netip.MustParsePrefix("2001:db8::13/64")}})
	h.Default = "eth0"
	members := []netip.Addr{netip.MustParseAddr("192.0.2.11")}
	if len(alone) > 0 && alone[0] {
		members = nil
	}
	p, err := plan.New(cfg, h, plan.Fleet{Members: members})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// harness runs a Relay with fake sockets.
type harness struct {
	r       *Relay
	k       *fakeKeepalived
	mu      sync.Mutex
	senders []*fakeSender
	opened  []string
}

func newHarness(t *testing.T, p *plan.Plan) *harness {
	h, cancel := startHarness(p)
	t.Cleanup(cancel)
	return h
}

// startHarness runs a Relay with fake sockets; the returned function stops
// it and waits for Run to return.
func startHarness(p *plan.Plan) (*harness, func()) {
	h := &harness{k: &fakeKeepalived{}}
	h.k.pid.Store(100)
	h.r = New(Options{Plan: p, Keepalived: h.k})
	h.r.open = func(iface string, src netip.Addr, v6 bool) (sender, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		s := &fakeSender{}
		h.senders = append(h.senders, s)
		h.opened = append(h.opened, fmt.Sprintf("%s %s v6=%v", iface, src, v6))
		return s, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.r.Run(ctx); close(done) }()
	var once sync.Once
	return h, func() { once.Do(func() { cancel(); <-done }) }
}

// sent lists everything sent so far, in order, over every socket.
func (h *harness) sent() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, s := range h.senders {
		s.mu.Lock()
		out = append(out, s.sent...)
		s.mu.Unlock()
	}
	return out
}

func (h *harness) waitSent(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := h.sent()
		if len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("sent %v, want at least %d", s, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRelayFollowsKeepalived: nothing is sent while the relay is off or
// keepalived is not MASTER; a new MASTER is relayed at once and then every
// advert interval, for that instance only, at priority 255; leaving MASTER
// or a restarted keepalived stops it.
func TestRelayFollowsKeepalived(t *testing.T) {
	p := testPlan(t, "192.0.2.100-101,2001:db8::100", "")
	h := newHarness(t, p)
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	time.Sleep(50 * time.Millisecond)
	if s := h.sent(); len(s) != 0 {
		t.Fatalf("sent %v while off", s)
	}
	h.r.SetListeners(Listeners{Multicast: true, Why: "test"})
	if got := h.waitSent(t, 1); got[0] != "v2 vrid 11 prio 255 to 224.0.0.18" {
		t.Errorf("first advert %q", got[0])
	}
	start := len(h.sent())
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_3", State: keepalived.StateNameMaster})
	got := h.waitSent(t, start+1)
	if !strings.Contains(strings.Join(got[start:], ","), "v3 vrid 13 prio 255 to ff02::12") {
		t.Errorf("the IPv6 master is not relayed at once: %v", got[start:])
	}
	h.mu.Lock()
	opened := slices.Clone(h.opened)
	h.mu.Unlock()
	if diff := cmp.Diff([]string{"eth0 192.0.2.13 v6=false", "eth0 192.0.2.13 v6=true"}, opened); diff != "" {
		t.Errorf("sockets (-want +got):\n%s", diff)
	}
	// About one advert per instance and second from now on.
	before := len(h.sent())
	time.Sleep(2200 * time.Millisecond)
	if n := len(h.sent()) - before; n < 3 || n > 8 {
		t.Errorf("%d adverts in 2.2 s for two masters, want about 4", n)
	}

	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameBackup})
	h.k.pid.Store(101) // keepalived restarted: it forgets VIP_3 too
	time.Sleep(1100 * time.Millisecond)
	before = len(h.sent())
	time.Sleep(1100 * time.Millisecond)
	if s := h.sent()[before:]; len(s) != 0 {
		t.Errorf("sent %v for instances no longer MASTER", s)
	}

	h.r.SetListeners(Listeners{Why: "test"})
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.senders {
		s.mu.Lock()
		if !s.closed {
			t.Error("a socket stayed open after the relay was turned off")
		}
		s.mu.Unlock()
	}
}

// TestRelayReplan: a new source address reopens the IPv4 socket from it.
func TestRelayReplan(t *testing.T) {
	h := newHarness(t, testPlan(t, "192.0.2.100", ""))
	h.r.SetListeners(Listeners{Multicast: true, Why: "test"})
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	h.waitSent(t, 1)
	h.r.Replan(testPlan(t, "192.0.2.100", "192.0.2.99"))
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	h.waitSent(t, 2)
	time.Sleep(1100 * time.Millisecond)
	h.mu.Lock()
	opened, first := slices.Clone(h.opened), h.senders[0]
	h.mu.Unlock()
	if diff := cmp.Diff([]string{"eth0 192.0.2.13 v6=false", "eth0 192.0.2.99 v6=false"}, opened); diff != "" {
		t.Errorf("sockets (-want +got):\n%s", diff)
	}
	first.mu.Lock()
	closed := first.closed
	first.mu.Unlock()
	if !closed {
		t.Error("the socket of the old source stayed open")
	}
}

// TestRelayGoodbye: when it stops, the relay of a node with no unicast peer
// (the last unicast node) sends the multicast nodes a priority-0 advert
// for each instance it was master of; with a peer, the peer takes over and
// the relay says nothing.
func TestRelayGoodbye(t *testing.T) {
	for _, alone := range []bool{true, false} {
		h, stop := startHarness(testPlan(t, "192.0.2.100-101", "", alone))
		h.r.SetListeners(Listeners{Multicast: true, Why: "test"})
		h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_2", State: keepalived.StateNameMaster})
		h.waitSent(t, 1)
		stop()
		got := h.sent()
		last := got[len(got)-1]
		if alone && last != "v2 vrid 12 prio 0 to 224.0.0.18" {
			t.Errorf("alone: last advert %q, want a priority-0 one for vrid 12", last)
		}
		if !alone && strings.Contains(strings.Join(got, ","), "prio 0") {
			t.Errorf("with a unicast peer: sent %v, want no priority-0 advert", got)
		}
	}
}

// TestRelayVRRPv2Pods: the IPv4 masters are relayed to each VRRPv2 pod the
// API server names, in VRRPv2 with the password, every second; IPv6 ones
// are not (VRRPv2 has no IPv6); when the relay stops as the last node of
// its side, each gets a priority-0 advert.
func TestRelayVRRPv2Pods(t *testing.T) {
	h, stop := startHarness(testPlan(t, "192.0.2.100,2001:db8::100", "", true))
	h.r.SetListeners(Listeners{VRRPv2: []netip.Addr{netip.MustParseAddr("192.0.2.12"), netip.MustParseAddr("192.0.2.11")}, Why: "test"})
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_2", State: keepalived.StateNameMaster})
	got := h.waitSent(t, 2)
	if diff := cmp.Diff([]string{"v2 vrid 11 prio 255 to 192.0.2.11", "v2 vrid 11 prio 255 to 192.0.2.12"}, got[:2]); diff != "" {
		t.Errorf("relayed (-want +got):\n%s", diff)
	}
	if multicast, n := h.r.Listening(); multicast || n != 2 {
		t.Errorf("Listening = %v, %d; want false, 2", multicast, n)
	}
	stop()
	got = h.sent()
	if strings.Contains(strings.Join(got, ","), "vrid 12") {
		t.Errorf("the IPv6 instance was relayed to VRRPv2 pods: %v", got)
	}
	if diff := cmp.Diff([]string{"v2 vrid 11 prio 0 to 192.0.2.11", "v2 vrid 11 prio 0 to 192.0.2.12"}, got[len(got)-2:]); diff != "" {
		t.Errorf("goodbye (-want +got):\n%s", diff)
	}
}

// TestRelayHeard: an address heard speaking VRRPv2 is relayed to at once,
// at the interval it speaks, until HeardHold after the last such advert.
func TestRelayHeard(t *testing.T) {
	h := newHarness(t, testPlan(t, "192.0.2.100", ""))
	var mu sync.Mutex
	now := time.Now()
	h.r.mu.Lock()
	h.r.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h.r.mu.Unlock()
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	time.Sleep(50 * time.Millisecond)
	if s := h.sent(); len(s) != 0 {
		t.Fatalf("sent %v to nobody", s)
	}
	h.r.Heard(netip.MustParseAddr("192.0.2.14"), 2*time.Second)
	if got := h.waitSent(t, 1); got[0] != "v2 vrid 11 prio 255 to 192.0.2.14" {
		t.Errorf("first advert %q", got[0])
	}
	// Sub-second and IPv6 sources are no VRRPv2 speakers.
	h.r.Heard(netip.MustParseAddr("192.0.2.15"), 500*time.Millisecond)
	h.r.Heard(netip.MustParseAddr("2001:db8::15"), time.Second)
	if _, n := h.r.Listening(); n != 1 {
		t.Errorf("Listening: %d VRRPv2 pods, want 1", n)
	}
	mu.Lock()
	now = now.Add(HeardHold)
	mu.Unlock()
	if h.r.Active() {
		t.Error("still active once the hold ended")
	}
}

// TestRelayKeepsMasterOnLowerPriority: a master that hears a lower
// priority (keepalived's MASTER_RX_LOWER_PRI line) is still master, and
// still relayed.
func TestRelayKeepsMasterOnLowerPriority(t *testing.T) {
	h := newHarness(t, testPlan(t, "192.0.2.100", ""))
	h.r.SetListeners(Listeners{VRRPv2: []netip.Addr{netip.MustParseAddr("192.0.2.12")}, Why: "test"})
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	h.waitSent(t, 1)
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: "MASTER_RX_LOWER_PRI", Priority: 200})
	before := len(h.sent())
	h.waitSent(t, before+1)
}

// TestRelayGoodbyeAtStop: keepalived's STOP line for a master with no
// unicast peer sends the other side a priority-0 advert at once, not when
// the relay stops; a STOP of a backup says nothing.
func TestRelayGoodbyeAtStop(t *testing.T) {
	h := newHarness(t, testPlan(t, "192.0.2.100-101", "", true))
	h.r.SetListeners(Listeners{VRRPv2: []netip.Addr{netip.MustParseAddr("192.0.2.12")}, Why: "test"})
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameMaster})
	h.waitSent(t, 1)
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_2", State: keepalived.StateNameStop})
	h.r.Note(keepalived.Notification{Instance: "OpenShift_IPFailover_VIP_1", State: keepalived.StateNameStop})
	got := h.sent()
	if last := got[len(got)-1]; last != "v2 vrid 11 prio 0 to 192.0.2.12" {
		t.Errorf("sent %v, want a priority-0 advert for vrid 11 last", got)
	}
	if strings.Contains(strings.Join(got, ","), "vrid 12 prio 0") {
		t.Errorf("sent %v: a goodbye for an instance that was not master", got)
	}
}
