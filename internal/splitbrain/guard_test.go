package splitbrain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host/hosttest"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/test/syncbuf"
)

// fakeHost is an in-memory interface: hosttest.Addrs, a MAC, and address
// change notifications after every Add and Delete.
type fakeHost struct {
	*hosttest.Addrs
	mac     net.HardwareAddr
	changes chan struct{}
	// lists counts the listings.
	lists atomic.Int64
}

func (h *fakeHost) List(iface string) ([]netip.Prefix, error) {
	h.lists.Add(1)
	return h.Addrs.List(iface)
}

func newFakeHost(prefixes ...string) *fakeHost {
	var ps []netip.Prefix
	for _, p := range prefixes {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	return &fakeHost{Addrs: hosttest.New(map[string][]netip.Prefix{"eth0": ps}), mac: macA, changes: make(chan struct{}, 1)}
}

func (h *fakeHost) Interface(name string) (net.Interface, error) {
	ifi, err := h.Addrs.Interface(name)
	ifi.HardwareAddr = h.mac
	return ifi, err
}

func (h *fakeHost) WatchAddrs(ctx context.Context, _ string, changed chan<- struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.changes:
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
}

func (h *fakeHost) Add(iface string, p netip.Prefix) error {
	defer h.changed()
	return h.Addrs.Add(iface, p)
}

func (h *fakeHost) Delete(iface string, p netip.Prefix) error {
	defer h.changed()
	return h.Addrs.Delete(iface, p)
}

func (h *fakeHost) changed() {
	select {
	case h.changes <- struct{}{}:
	default:
	}
}

func (h *fakeHost) has(a netip.Addr) bool {
	ps, _ := h.List("eth0")
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr() == a })
}

// fakeConn is a socket: what the test puts in is read, what the guard
// writes is kept.
type fakeConn struct {
	in     chan packetIn
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex
	written [][]byte
	onWrite func(b []byte)
}

type packetIn struct {
	b    []byte
	from net.Addr
}

func newFakeConn() *fakeConn {
	return &fakeConn{in: make(chan packetIn, 64), closed: make(chan struct{})}
}

func (c *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-c.in:
		return copy(b, p.b), p.from, nil
	case <-c.closed:
		return 0, nil, net.ErrClosed
	}
}

func (c *fakeConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	c.written = append(c.written, bytes.Clone(b))
	f := c.onWrite
	c.mu.Unlock()
	if f != nil {
		f(b)
	}
	return len(b), nil
}

func (c *fakeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// frames returns what the guard wrote so far.
func (c *fakeConn) frames() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.written)
}

func (c *fakeConn) setOnWrite(f func([]byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onWrite = f
}

type fakeKeepalived struct {
	pid      atomic.Int64
	stopping atomic.Bool
}

func (k *fakeKeepalived) PID() int       { return int(k.pid.Load()) }
func (k *fakeKeepalived) Stopping() bool { return k.stopping.Load() }

// guardTest is a guard on fakes, with short periods.
type guardTest struct {
	t      *testing.T
	host   *fakeHost
	socks  sockets
	arp    *fakeConn
	vrrp4  *fakeConn
	nsOut  *fakeConn
	naIn   *fakeConn
	notify *io.PipeWriter
	k      *fakeKeepalived
	logs   *syncbuf.Buffer
	g      *Guard
	done   chan struct{}
}

var testTiming = timing{probe: 100 * time.Millisecond, confirm: 50 * time.Millisecond, grace: 300 * time.Millisecond, mend: 150 * time.Millisecond, relist: time.Hour,
	contest: 50 * time.Millisecond, spacing: 200 * time.Millisecond}

func newGuardTest(t *testing.T, raw config.Raw, prefixes ...string) *guardTest {
	t.Helper()
	return newGuardTestTiming(t, testTiming, raw, prefixes...)
}

func newGuardTestTiming(t *testing.T, tm timing, raw config.Raw, prefixes ...string) *guardTest {
	t.Helper()
	return newGuardTestWith(t, tm, raw, func(*Options) {}, prefixes...)
}

// newGuardTestWith is newGuardTestTiming with Options changed by opts.
func newGuardTestWith(t *testing.T, tm timing, raw config.Raw, opts func(*Options), prefixes ...string) *guardTest {
	t.Helper()
	gt := &guardTest{t: t, host: newFakeHost(prefixes...), arp: newFakeConn(), vrrp4: newFakeConn(), k: &fakeKeepalived{}, logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	gt.k.pid.Store(100)
	gt.nsOut, gt.naIn = newFakeConn(), newFakeConn()
	gt.socks = sockets{arp: gt.arp, vrrp4: gt.vrrp4, nsOut: gt.nsOut, naIn: gt.naIn}
	r, w := io.Pipe()
	gt.notify = w
	ifi, err := gt.host.Interface("eth0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		Plan: testPlan(t, raw), Host: gt.host, Keepalived: gt.k,
		Logger: slog.New(slog.NewTextHandler(gt.logs, nil)),
	}
	opts(&o)
	g, err := newGuard(o, &ifi, r, gt.socks, tm)
	if err != nil {
		t.Fatal(err)
	}
	gt.g = g
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		defer close(gt.done)
		if err := g.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-gt.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after the context ended")
		}
		if t.Failed() {
			t.Logf("guard's log:\n%s", gt.logs.String())
		}
	})
	return gt
}

func (gt *guardTest) say(lines ...string) {
	gt.t.Helper()
	for _, l := range lines {
		if _, err := io.WriteString(gt.notify, l+"\n"); err != nil {
			gt.t.Fatal(err)
		}
	}
}

// waitFor polls cond for up to 10 s.
func (gt *guardTest) waitFor(what string, cond func() bool) {
	gt.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			gt.t.Fatalf("no %s within 10 s; snapshot %+v", what, gt.g.Snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGuardRemovesStrays(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100-101"}, "192.0.2.11/24", "192.0.2.101/32")
	v100, v101 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101")
	// Once removed, the stray is probed for: the holder's guard takes the
	// probe as a claim, finds this node silent and announces the VIP.
	probe100, err := arpProbe(macA, v100)
	if err != nil {
		t.Fatal(err)
	}
	var poked atomic.Int64
	gt.arp.setOnWrite(func(b []byte) {
		if bytes.Equal(b, probe100) && !gt.host.has(v100) {
			poked.Add(1)
		}
	})
	// keepalived 2.2.7 writes MASTER_RX_LOWER_PRI when a master hears a
	// lower priority: an event, the instance stays MASTER.
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" BACKUP 240`, `INSTANCE "OpenShift_IPFailover_VIP_2" MASTER 254`,
		`INSTANCE "OpenShift_IPFailover_VIP_2" MASTER_RX_LOWER_PRI 254`)

	// A VIP added by hand, with a subnet's prefix length, to the BACKUP
	// instance's node.
	added := time.Now()
	if err := gt.host.Add("eth0", netip.MustParsePrefix("192.0.2.100/24")); err != nil {
		t.Fatal(err)
	}
	gt.waitFor("stray removed", func() bool { return !gt.host.has(v100) })
	if took := time.Since(added); took < testTiming.grace {
		t.Errorf("removed after %v, before the grace period of %v", took, testTiming.grace)
	}
	gt.waitFor("count", func() bool { return gt.g.Snapshot().StrayRemoved[v100] == 1 })
	gt.waitFor("a probe for the removed stray", func() bool { return poked.Load() == 1 })
	if !gt.host.has(v101) || !gt.host.has(netip.MustParseAddr("192.0.2.11")) {
		t.Error("the MASTER's VIP or the node's own address went too")
	}
	if l := gt.logs.Lines("removed a stray VIP"); len(l) != 1 || !strings.Contains(l[0], "vip=192.0.2.100/24") || !strings.Contains(l[0], "keepalived_state=BACKUP") {
		t.Errorf("log lines %q, want one naming 192.0.2.100/24 and BACKUP", l)
	}
	if n := gt.g.Snapshot().StrayRemoved[v101]; n != 0 {
		t.Errorf("stray count of the MASTER's VIP %d", n)
	}

	// keepalived restarts: what the old one said no longer holds, so a VIP
	// that appears now stays until the new one has spoken.
	gt.k.pid.Store(200)
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_2" MASTER 254`)
	if err := gt.host.Add("eth0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * testTiming.grace)
	if !gt.host.has(v100) {
		t.Fatal("a VIP removed while the new keepalived had not announced its instance")
	}
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" BACKUP 240`)
	gt.waitFor("second stray removed", func() bool { return !gt.host.has(v100) })
	gt.waitFor("count 2", func() bool { return gt.g.Snapshot().StrayRemoved[v100] == 2 })

	// The instance becomes MASTER: its VIP stays.
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" MASTER 240`)
	time.Sleep(50 * time.Millisecond)
	if err := gt.host.Add("eth0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * testTiming.grace)
	if !gt.host.has(v100) {
		t.Error("a MASTER's VIP was removed")
	}
}

// TestGuardRestoresMissing: keepalived reports an instance MASTER, but its
// VIP is not on the interface (an add that did not take; keepalived adds
// once, as it becomes MASTER): the guard puts it back after the mend
// period, announces it and counts it. keepalived does not remove on leaving
// MASTER what it did not add, so the guard removes it at once then.
func TestGuardRestoresMissing(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100-101"}, "192.0.2.11/24", "192.0.2.101/32")
	v100, v101 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101")
	garp, err := arpAnnouncement(macA, v100)
	if err != nil {
		t.Fatal(err)
	}
	said := time.Now()
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" MASTER 254`, `INSTANCE "OpenShift_IPFailover_VIP_2" MASTER 254`)
	gt.waitFor("the missing VIP put back", func() bool { return gt.host.has(v100) })
	if took := time.Since(said); took < testTiming.mend {
		t.Errorf("put back after %v, before the mend period of %v", took, testTiming.mend)
	}
	gt.waitFor("count", func() bool { return gt.g.Snapshot().Restored[v100] == 1 })
	gt.waitFor("its announcement", func() bool { return count(gt.arp.frames(), garp) == 2 })
	if n := gt.g.Snapshot().Announced[v100]; n != 0 {
		t.Errorf("the announcement of a VIP put back counted as the end of a contest (%d)", n)
	}
	if n := gt.g.Snapshot().Restored[v101]; n != 0 {
		t.Errorf("restored the VIP that was on the interface %d times", n)
	}
	if l := gt.logs.Lines("put back a missing VIP"); len(l) != 1 || !strings.Contains(l[0], "vip=192.0.2.100/32") || !strings.Contains(l[0], "instance=OpenShift_IPFailover_VIP_1") {
		t.Errorf("log lines %q, want one naming 192.0.2.100/32 and its instance", l)
	}
	listed, err := gt.host.List("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(listed, netip.MustParsePrefix("192.0.2.100/32")) {
		t.Errorf("addresses %v, want 192.0.2.100/32 as keepalived adds it", listed)
	}

	// The instance leaves MASTER; keepalived leaves the VIP it did not add.
	left := time.Now()
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" BACKUP 254`)
	gt.waitFor("the put-back VIP removed", func() bool { return !gt.host.has(v100) })
	if took := time.Since(left); took >= testTiming.grace {
		t.Errorf("removed %v after leaving MASTER, want at once (grace period %v)", took, testTiming.grace)
	}
	if !gt.host.has(v101) {
		t.Error("the other MASTER's VIP went too")
	}
	if l := gt.logs.Lines("removed a stray VIP"); len(l) != 1 || !strings.Contains(l[0], "put_back_here=true") {
		t.Errorf("log lines %q, want one saying the VIP was put back here", l)
	}
}

// TestGuardKeepalivedStopping: a keepalived that ipfailover stops removes
// its VIPs at once and writes STOP only as it exits. Meanwhile nothing is
// put back, even on a MASTER line read late, and a VIP the guard put back,
// which keepalived does not remove, is removed at once.
func TestGuardKeepalivedStopping(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100-101"}, "192.0.2.11/24", "192.0.2.101/32")
	v100, v101 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101")
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" MASTER 254`, `INSTANCE "OpenShift_IPFailover_VIP_2" MASTER 254`)
	gt.waitFor("the missing VIP put back", func() bool { return gt.g.Snapshot().Restored[v100] == 1 })

	gt.k.stopping.Store(true)
	if err := gt.host.Delete("eth0", netip.PrefixFrom(v101, 32)); err != nil { // keepalived's own removal
		t.Fatal(err)
	}
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_2" MASTER 254`) // written before the SIGTERM
	gt.waitFor("the put-back VIP removed", func() bool { return !gt.host.has(v100) })
	if l := gt.logs.Lines("removed a stray VIP"); len(l) != 1 || !strings.Contains(l[0], "put_back_here=true") {
		t.Errorf("log lines %q, want one saying the VIP was put back here", l)
	}
	time.Sleep(4 * testTiming.mend)
	if gt.host.has(v100) || gt.host.has(v101) {
		t.Errorf("a VIP is back on the interface while keepalived stops: 192.0.2.100 %v, 192.0.2.101 %v", gt.host.has(v100), gt.host.has(v101))
	}
	if n := gt.g.Snapshot().Restored; n[v100] != 1 || n[v101] != 0 {
		t.Errorf("restored %v, want 192.0.2.100 once (before the stop) and 192.0.2.101 never", n)
	}
}

func TestGuardStrayRemovalFails(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100"}, "192.0.2.11/24")
	p := netip.MustParsePrefix("192.0.2.100/32")
	gt.host.FailDelete(p, errors.New("operation not permitted"))
	gt.say(`INSTANCE "OpenShift_IPFailover_VIP_1" BACKUP 240`)
	if err := gt.host.Add("eth0", p); err != nil {
		t.Fatal(err)
	}
	gt.waitFor("two failures logged", func() bool { return len(gt.logs.Lines("removing a stray VIP")) >= 2 })
	if n := gt.g.Snapshot().StrayRemoved[p.Addr()]; n != 0 {
		t.Errorf("a failed removal counted: %d", n)
	}
	if l := gt.logs.Lines("removing a stray VIP"); !strings.Contains(l[0], "operation not permitted") {
		t.Errorf("log %q does not give the reason", l[0])
	}
}

func TestGuardDuplicates(t *testing.T) {
	var mu sync.Mutex
	var told []string
	gt := newGuardTestWith(t, testTiming, config.Raw{VirtualIPs: "192.0.2.100-101"}, func(o *Options) {
		o.Duplicated = func(d Duplicate) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, fmt.Sprintf("%s %s %s started=%v released=%v", d.VIP, d.Instance, macList(d.Others), d.Started, d.Released))
		}
	}, "192.0.2.11/24")
	v100 := netip.MustParseAddr("192.0.2.100")
	var answering atomic.Bool
	answering.Store(true)
	gt.arp.setOnWrite(func(b []byte) {
		d := newARPDecoder()
		cl := d.claims(b)
		if len(cl) != 1 || cl[0].addr != v100 || !answering.Load() {
			return
		}
		gt.arp.in <- packetIn{b: arpFrame(t, 2, macB, "192.0.2.100", macA, "0.0.0.0")}
	})
	if err := gt.host.Add("eth0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	if err := gt.host.Add("eth0", netip.MustParsePrefix("192.0.2.101/32")); err != nil {
		t.Fatal(err)
	}
	gt.waitFor("a conflict on .100", func() bool { return len(gt.g.Snapshot().Duplicates[v100]) == 1 })
	s := gt.g.Snapshot()
	if got := s.Duplicates[v100][0].String(); got != macB.String() || len(s.Duplicates) != 1 {
		t.Errorf("duplicates %v, want only %s with %s", s.Duplicates, v100, macB)
	}
	if l := gt.logs.Lines("duplicate VIP: another host answers"); len(l) != 1 || !strings.Contains(l[0], "vip=192.0.2.100") || !strings.Contains(l[0], "other_mac="+macB.String()) {
		t.Errorf("log lines %q, want one naming the VIP and %s", l, macB)
	}
	// The probes are ARP probes for the held VIPs, from this node's MAC.
	gt.arp.mu.Lock()
	var probed []string
	for _, b := range gt.arp.written {
		f, _ := arpProbe(macA, v100)
		if bytes.Equal(b, f) {
			probed = append(probed, "100")
		}
		f, _ = arpProbe(macA, netip.MustParseAddr("192.0.2.101"))
		if bytes.Equal(b, f) {
			probed = append(probed, "101")
		}
	}
	gt.arp.mu.Unlock()
	if !slices.Contains(probed, "100") || !slices.Contains(probed, "101") {
		t.Errorf("probes sent for %v, want both VIPs", probed)
	}

	// Claims from this node's own MAC and on addresses that are not VIPs
	// change nothing; the other host stops answering: the conflict ends.
	gt.arp.in <- packetIn{b: arpFrame(t, 2, macA, "192.0.2.101", macA, "0.0.0.0")}
	answering.Store(false)
	gt.waitFor("the conflict to end", func() bool { return len(gt.g.Snapshot().Duplicates) == 0 })
	if l := gt.logs.Lines("duplicate VIP over: no other host answers"); len(l) != 1 || !strings.Contains(l[0], "vip=192.0.2.100") {
		t.Errorf("log lines %q, want one end naming the VIP", l)
	}

	// A conflict that ends because this node lets the VIP go.
	answering.Store(true)
	gt.waitFor("a second conflict", func() bool { return len(gt.g.Snapshot().Duplicates) == 1 })
	if err := gt.host.Delete("eth0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	gt.waitFor("the conflict to end with the release", func() bool { return len(gt.g.Snapshot().Duplicates) == 0 })
	if l := gt.logs.Lines("duplicate VIP over: this node released it"); len(l) != 1 {
		t.Errorf("log lines %q, want one release", l)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"192.0.2.100 OpenShift_IPFailover_VIP_1 " + macB.String() + " started=true released=false",
		"192.0.2.100 OpenShift_IPFailover_VIP_1 " + macB.String() + " started=false released=false",
		"192.0.2.100 OpenShift_IPFailover_VIP_1 " + macB.String() + " started=true released=false",
		"192.0.2.100 OpenShift_IPFailover_VIP_1 " + macB.String() + " started=false released=true",
	}
	if diff := cmp.Diff(want, told); diff != "" {
		t.Errorf("Duplicated told (-want +got):\n%s", diff)
	}
}

// TestGuardAnnouncesWhenTheContestEnds: another host claims VIPs this node
// holds (a gratuitous ARP, a neighbour advertisement) and answers the
// probes sent to it alone while it has them; once it stops, this node
// announces each VIP (twice), counts and logs it. A duplicate address
// detection probe with no host behind it (a stray's remover) is announced
// after one round; a VIP this node lets go is not.
func TestGuardAnnouncesWhenTheContestEnds(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100,2001:db8::100,192.0.2.101"}, "192.0.2.11/24", "2001:db8::11/64",
		"192.0.2.100/32", "2001:db8::100/128", "192.0.2.101/32")
	v4, v6, v101 := netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("2001:db8::100"), netip.MustParseAddr("192.0.2.101")
	var holding atomic.Bool
	holding.Store(true)
	// The other host answers probes sent to its MAC while it holds.
	gt.arp.setOnWrite(func(b []byte) {
		cl := newARPDecoder().claims(b)
		if holding.Load() && len(cl) == 1 && cl[0].addr != v101 && bytes.Equal(b[0:6], macB) {
			gt.arp.in <- packetIn{b: arpFrame(t, 2, macB, cl[0].addr.String(), macA, "0.0.0.0")}
		}
	})
	tlla := layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: macB}}
	gt.nsOut.setOnWrite(func(b []byte) {
		if holding.Load() && len(b) == 14+40+nsLen && b[14+40] == icmpv6NS && bytes.Equal(b[0:6], macB) {
			gt.naIn.in <- packetIn{b: naMessage(t, "2001:db8::100", tlla), from: &net.IPAddr{IP: net.ParseIP("fe80::b")}}
		}
	})
	gt.waitFor("the first probes", func() bool { return len(gt.arp.frames()) > 0 && len(gt.nsOut.frames()) > 0 })
	gt.arp.in <- packetIn{b: arpFrame(t, 1, macB, "192.0.2.100", make(net.HardwareAddr, 6), "192.0.2.100")}
	gt.naIn.in <- packetIn{b: naMessage(t, "2001:db8::100", tlla), from: &net.IPAddr{IP: net.ParseIP("fe80::b")}}
	asked := func(c *fakeConn) int {
		n := 0
		for _, b := range c.frames() {
			if bytes.Equal(b[0:6], macB) {
				n++
			}
		}
		return n
	}
	gt.waitFor("three rounds of probes to the other host", func() bool { return asked(gt.arp) >= 3 && asked(gt.nsOut) >= 3 })
	if n := gt.g.Snapshot().Announced; n[v4] != 0 || n[v6] != 0 {
		t.Fatalf("announced %v while the other host still answers", n)
	}
	holding.Store(false)
	gt.waitFor("both VIPs announced", func() bool { n := gt.g.Snapshot().Announced; return n[v4] == 1 && n[v6] == 1 })
	garp, err := arpAnnouncement(macA, v4)
	if err != nil {
		t.Fatal(err)
	}
	na, err := naAnnouncement(macA, v6, false)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(gt.arp.frames(), garp); n != 2 {
		t.Errorf("%d gratuitous ARPs for %s, want 2", n, v4)
	}
	if n := count(gt.nsOut.frames(), na); n != 2 {
		t.Errorf("%d neighbour advertisements for %s, want 2", n, v6)
	}
	if l := gt.logs.Lines("VIP contest over"); len(l) != 2 || !strings.Contains(strings.Join(l, "\n"), "other_mac="+macB.String()) {
		t.Errorf("log lines %q, want one per VIP naming %s", l, macB)
	}

	// A duplicate address detection probe: announced after one round.
	probe, _, err := nsProbe(macB, v6)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(testTiming.spacing)
	gt.naIn.in <- packetIn{b: probe[14+40:], from: &net.IPAddr{IP: net.IPv6unspecified}}
	gt.waitFor("the probed VIP announced", func() bool { return gt.g.Snapshot().Announced[v6] == 2 })

	// Contested, then let go by this node: nothing to announce.
	gt.arp.in <- packetIn{b: arpFrame(t, 2, macB, "192.0.2.101", macA, "0.0.0.0")}
	if err := gt.host.Delete("eth0", netip.MustParsePrefix("192.0.2.101/32")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * testTiming.contest)
	if n := gt.g.Snapshot().Announced[v101]; n != 0 {
		t.Errorf("announced %s %d times after letting it go", v101, n)
	}
}

// TestGuardAnnouncesAfterARacingTaker: another backup took the VIP at the
// same moment as this node, announced it a moment after this node did, and
// yielded without a word (this node cannot hear its adverts: a one-way
// partition). Its gratuitous ARP arrives before the listing that shows the
// VIP here; the guard still asks it, and announces the VIP once it does not
// answer, so that the clients that followed it come back.
func TestGuardAnnouncesAfterARacingTaker(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100"}, "192.0.2.11/24")
	v := netip.MustParseAddr("192.0.2.100")
	gt.arp.in <- packetIn{b: arpFrame(t, 1, macB, "192.0.2.100", make(net.HardwareAddr, 6), "192.0.2.100")}
	time.Sleep(testTiming.contest / 4)
	if err := gt.host.Add("eth0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	gt.waitFor("the VIP announced", func() bool { return gt.g.Snapshot().Announced[v] == 1 })
	garp, err := arpAnnouncement(macA, v)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(gt.arp.frames(), garp); n != 2 {
		t.Errorf("%d gratuitous ARPs for %s, want 2 (one announcement)", n, v)
	}
	if l := gt.logs.Lines("VIP contest over"); len(l) != 1 || !strings.Contains(l[0], "other_mac="+macB.String()) {
		t.Errorf("log lines %q, want one naming %s", l, macB)
	}
}

// TestGuardAnnouncesOnlyWhatItHolds: keepalived removes a contested VIP
// and the contest ends before the address notification arrives: the
// guard, which lists the addresses before it announces, says nothing.
func TestGuardAnnouncesOnlyWhatItHolds(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100"}, "192.0.2.11/24", "192.0.2.100/32")
	v := netip.MustParseAddr("192.0.2.100")
	var answering atomic.Bool
	answering.Store(true)
	asked := atomic.Int64{}
	gt.arp.setOnWrite(func(b []byte) {
		if bytes.Equal(b[0:6], macB) {
			asked.Add(1)
			if answering.Load() {
				gt.arp.in <- packetIn{b: arpFrame(t, 2, macB, "192.0.2.100", macA, "0.0.0.0")}
			}
		}
	})
	gt.waitFor("the first probe", func() bool { return len(gt.arp.frames()) > 0 })
	gt.arp.in <- packetIn{b: arpFrame(t, 1, macB, "192.0.2.100", make(net.HardwareAddr, 6), "192.0.2.100")}
	gt.waitFor("two probes to the other host", func() bool { return asked.Load() >= 2 })
	// Gone without a notification (the fake's own Delete would send one),
	// while the contest goes on; then the other host stops answering.
	if err := gt.host.Addrs.Delete("eth0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	answering.Store(false)
	time.Sleep(5 * testTiming.contest)
	garp, err := arpAnnouncement(macA, v)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(gt.arp.frames(), garp); n != 0 || gt.g.Snapshot().Announced[v] != 0 {
		t.Errorf("%d gratuitous ARPs for a VIP no longer on the interface", n)
	}
}

func count(frames [][]byte, f []byte) int {
	n := 0
	for _, b := range frames {
		if bytes.Equal(b, f) {
			n++
		}
	}
	return n
}

func TestGuardForeignAdverts(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100,192.0.2.102", VIPGroups: "1", Offset: "10"}, "192.0.2.11/24")
	frames := capturedAdverts(t)
	// keepalived's own advert for vrid 11 with VIPs .100 and .102 and
	// auth_pass OpenShift-IPFailover: exactly this deployment's.
	_, member, _ := ipPayload(t, frames["v2-multicast"])
	// The same with another password.
	otherPass := bytes.Clone(member)
	copy(otherPass[len(otherPass)-8:], "hunter2\x00")
	from := func(s string) net.Addr { return &net.IPAddr{IP: net.ParseIP(s)} }
	for range 3 {
		gt.vrrp4.in <- packetIn{b: member, from: from("192.0.2.12")}
		gt.vrrp4.in <- packetIn{b: otherPass, from: from("192.0.2.99")}
	}
	gt.waitFor("three foreign adverts", func() bool {
		f := gt.g.Snapshot().Foreign
		return len(f) == 1 && f[0].Adverts == 3
	})
	if f := gt.g.Snapshot().Foreign[0]; f.VRID != 11 || f.Source != "192.0.2.99" {
		t.Errorf("foreign %+v, want vrid 11 from 192.0.2.99", f)
	}
	l := gt.logs.Lines("foreign VRRP speaker")
	if len(l) != 1 {
		t.Fatalf("log lines %q, want one for the one source", l)
	}
	for _, want := range []string{"source=192.0.2.99", "vrid=11", "another authentication password", "ipfailover vr-ids", "OPENSHIFT_HA_VRRP_ID_OFFSET"} {
		if !strings.Contains(l[0], want) {
			t.Errorf("log line %q lacks %q", l[0], want)
		}
	}
	// The node's own address is never a foreign speaker; neither is a
	// router id of another deployment.
	gt.vrrp4.in <- packetIn{b: otherPass, from: from("192.0.2.11")}
	otherVRID := bytes.Clone(otherPass)
	otherVRID[1] = 99
	gt.vrrp4.in <- packetIn{b: otherVRID, from: from("192.0.2.98")}
	gt.vrrp4.in <- packetIn{b: otherPass, from: from("192.0.2.99")}
	gt.waitFor("the fourth advert", func() bool { return gt.g.Snapshot().Foreign[0].Adverts == 4 })
	if f := gt.g.Snapshot().Foreign; len(f) != 1 {
		t.Errorf("foreign %+v, want only 192.0.2.99", f)
	}
}

// TestGuardReplan: with peers from the pods, a pod that joins is a foreign
// speaker only until a plan lists it.
func TestGuardReplan(t *testing.T) {
	raw := config.Raw{VirtualIPs: "192.0.2.100,192.0.2.102", VIPGroups: "1", PeersFrom: config.PeersFromPods, PodName: "a"}
	gt := newGuardTest(t, raw, "192.0.2.11/24")
	_, member, _ := ipPayload(t, capturedAdverts(t)["v2-multicast"])
	from := &net.IPAddr{IP: net.ParseIP("192.0.2.13")}
	gt.vrrp4.in <- packetIn{b: member, from: from}
	gt.waitFor("an advert from an unlisted pod counted", func() bool { return len(gt.g.Snapshot().Foreign) == 1 })

	gt.g.Replan(testPlanWith(t, raw, "192.0.2.11/24", "192.0.2.12", "192.0.2.13"))
	for range 3 {
		gt.vrrp4.in <- packetIn{b: member, from: from}
	}
	gt.vrrp4.in <- packetIn{b: member, from: &net.IPAddr{IP: net.ParseIP("192.0.2.14")}}
	gt.waitFor("an advert from another unlisted pod counted", func() bool { return len(gt.g.Snapshot().Foreign) == 2 })
	for _, f := range gt.g.Snapshot().Foreign {
		if f.Source == "192.0.2.13" && f.Adverts != 1 {
			t.Errorf("%+v: adverts of a listed pod counted", f)
		}
	}

	// 192.0.2.13 renumbered to 192.0.2.71: its last adverts from the old
	// address, sent before its keepalived reloaded, are a member's for a
	// while (3 advert intervals); later ones are foreign again.
	gt.g.Replan(testPlanWith(t, raw, "192.0.2.11/24", "192.0.2.12", "192.0.2.71"))
	gt.vrrp4.in <- packetIn{b: member, from: from}
	gt.vrrp4.in <- packetIn{b: member, from: &net.IPAddr{IP: net.ParseIP("192.0.2.15")}}
	gt.waitFor("an advert from a third unlisted pod counted", func() bool { return len(gt.g.Snapshot().Foreign) == 3 })
	for _, f := range gt.g.Snapshot().Foreign {
		if f.Source == "192.0.2.13" && f.Adverts != 1 {
			t.Errorf("%+v: the adverts of a peer that just renumbered counted", f)
		}
	}
	gt.g.expectMu.Lock()
	gt.g.departed[netip.MustParseAddr("192.0.2.13")] = time.Now().Add(-4 * time.Second)
	gt.g.expectMu.Unlock()
	gt.vrrp4.in <- packetIn{b: member, from: from}
	gt.waitFor("an advert from the old address counted after the grace", func() bool {
		for _, f := range gt.g.Snapshot().Foreign {
			if f.Source == "192.0.2.13" && f.Adverts == 2 {
				return true
			}
		}
		return false
	})
}

// TestGuardHeard: with the peers from the pods keepalived speaks VRRPv3; an
// advert of this deployment in VRRPv2 from a peer or a VRRPv2 pod, or in
// VRRPv3 from a VRRPv2 pod, is what a pod of the workload speaks where
// keepalived does not hear it: Heard gets its source, version and
// interval, and it is no foreign speaker. Relays (priority 255) and
// goodbyes (0) say nothing of what a pod speaks; a stranger's advert is
// foreign.
func TestGuardHeard(t *testing.T) {
	raw := config.Raw{VirtualIPs: "192.0.2.100,192.0.2.102", VIPGroups: "1", PeersFrom: config.PeersFromPods, PodName: "a", MonitorPort: "0"}
	type heard struct {
		src      string
		version  int
		interval time.Duration
	}
	got := make(chan heard, 10)
	gt := newGuardTestWith(t, testTiming, raw, func(o *Options) {
		o.Heard = func(src netip.Addr, version int, interval time.Duration) {
			got <- heard{src.String(), version, interval}
		}
	}, "192.0.2.11/24")
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	h := hosttest.New(map[string][]netip.Prefix{"eth0": {netip.MustParsePrefix("192.0.2.11/24")}})
	h.Default = "eth0"
	p, err := plan.New(cfg, h, plan.Fleet{Members: []netip.Addr{netip.MustParseAddr("192.0.2.12")}, VRRPv2: []netip.Addr{netip.MustParseAddr("192.0.2.14")}})
	if err != nil {
		t.Fatal(err)
	}
	gt.g.Replan(p)
	// keepalived's VRRPv2 advert for vrid 11 with .100 and .102, priority
	// 200, every second, and the same in VRRPv3 every 0.2 s.
	_, v2, _ := ipPayload(t, capturedAdverts(t)["v2-multicast"])
	v3 := []byte{0x31, 11, 200, 2, 0, 20, 0, 0, 192, 0, 2, 100, 192, 0, 2, 102}
	relay := bytes.Clone(v2)
	relay[2] = 255
	from := func(s string) net.Addr { return &net.IPAddr{IP: net.ParseIP(s)} }
	for _, in := range []packetIn{
		{b: relay, from: from("192.0.2.12")},
		{b: v2, from: from("192.0.2.12")},
		{b: v2, from: from("192.0.2.14")},
		{b: v3, from: from("192.0.2.14")},
		{b: v2, from: from("192.0.2.99")},
	} {
		gt.vrrp4.in <- in
	}
	gt.waitFor("the stranger counted", func() bool { return len(gt.g.Snapshot().Foreign) == 1 })
	want := []heard{{"192.0.2.12", 2, time.Second}, {"192.0.2.14", 2, time.Second}, {"192.0.2.14", 3, 200 * time.Millisecond}}
	for _, w := range want {
		select {
		case h := <-got:
			if h != w {
				t.Errorf("heard %+v, want %+v", h, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("heard nothing, want %+v", w)
		}
	}
	select {
	case h := <-got:
		t.Errorf("heard %+v too", h)
	default:
	}
	if f := gt.g.Snapshot().Foreign; f[0].Source != "192.0.2.99" {
		t.Errorf("foreign %+v, want only 192.0.2.99", f)
	}
}

// TestGuardOpenErrors: a guard needs its plan, host and keepalived.
func TestGuardOpenErrors(t *testing.T) {
	for i, o := range []Options{{}, {Plan: testPlan(t, config.Raw{VirtualIPs: "192.0.2.100"})}} {
		if _, err := Open(o); err == nil || !strings.Contains(err.Error(), "required") {
			t.Errorf("Open(options %d) = %v, want an error naming what is required", i, err)
		}
	}
}

// TestPanickingPacketIsDropped: a packet that makes a decoder panic is
// dropped and logged; the guard goes on.
func TestPanickingPacketIsDropped(t *testing.T) {
	gt := newGuardTest(t, config.Raw{VirtualIPs: "192.0.2.100"}, "192.0.2.11/24")
	got := gt.g.decodeClaims(func([]byte, net.Addr) []claim { panic("index out of range [7] with length 3") }, []byte{1, 2, 3}, nil)
	if got != nil {
		t.Errorf("claims %v from a packet whose decoding panicked", got)
	}
	if !strings.Contains(gt.logs.String(), "dropped a packet whose handling failed") {
		t.Errorf("no log line for the dropped packet:\n%s", gt.logs)
	}
}

// TestGuardRelistGap: a burst of address changes (keepalived adding VIPs
// one by one, 10 ms apart) is listed once or twice, not once per change
// (20 listings without the gap), and the last
// change is listed all the same: the new VIP is probed.
func TestGuardRelistGap(t *testing.T) {
	tm := testTiming
	tm.relistGap = 2 * time.Second
	gt := newGuardTestTiming(t, tm, config.Raw{VirtualIPs: "192.0.2.100-119"}, "192.0.2.11/24")
	gt.waitFor("the first listing", func() bool { return gt.host.lists.Load() > 0 })
	before := gt.host.lists.Load()
	var last netip.Addr
	for i := range 20 {
		last = netip.AddrFrom4([4]byte{192, 0, 2, byte(100 + i)})
		if err := gt.host.Add("eth0", netip.PrefixFrom(last, 32)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // the loop sees each change
	}
	probe, err := arpProbe(macA, last)
	if err != nil {
		t.Fatal(err)
	}
	gt.waitFor("a probe of the last VIP added", func() bool {
		return slices.ContainsFunc(gt.arp.frames(), func(b []byte) bool { return bytes.Equal(b, probe) })
	})
	if n := gt.host.lists.Load() - before; n > 3 {
		t.Errorf("20 changes in a burst: %d listings, want at most 3", n)
	}
}
