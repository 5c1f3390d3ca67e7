package splitbrain

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// filterInput returns what the kernel shows the filter of a raw socket for
// a captured frame: the IPv4 packet from its header, or the IPv6 payload;
// and the advert alone.
func filterInput(t testing.TB, frame []byte) (in, advert []byte, v6 bool) {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if l, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		return append(bytes.Clone(l.Contents), l.Payload...), l.Payload, false
	}
	l := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	return l.Payload, l.Payload, true
}

func runFilter(t testing.TB, prog []bpf.Instruction, in []byte) bool {
	t.Helper()
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	n, err := vm.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// The plans whose members sent the captured adverts: vrid 11 with
// 192.0.2.100 and 192.0.2.102 in one group, password OpenShif...; the IPv6
// instance of vrid 12 with 2001:db8::100-101; and a unicast plan of vrid
// 13 with 192.0.2.103, password "abc", on the peer 192.0.2.12 of
// 192.0.2.11.
var (
	multicastRaw = config.Raw{VirtualIPs: "192.0.2.100,192.0.2.102,2001:db8::100-101", VIPGroups: "2", Offset: "10"}
	unicastRaw   = config.Raw{ConfigName: "abc", VirtualIPs: "192.0.2.103", Offset: "12", UnicastPeers: "192.0.2.11,192.0.2.12"}
)

// TestAdvertFilter runs the kernel filter in x/net/bpf's virtual machine on
// the adverts keepalived sent and on changed copies: a member's advert is
// dropped, anything that differs passes, a router id of another
// deployment is dropped.
func TestAdvertFilter(t *testing.T) {
	frames := capturedAdverts(t)
	multicast := expectations(testPlan(t, multicastRaw))
	unicast := expectations(unicastPlan(t))
	type change func(in []byte, advertAt int)
	set := func(off int, b ...byte) change {
		return func(in []byte, at int) { copy(in[at+off:], b) }
	}
	tests := []struct {
		name   string
		expect map[key]expectation
		frame  string
		change change
		pass   bool
	}{
		{"a member's v2 advert", multicast, "v2-multicast", nil, false},
		{"another password", multicast, "v2-multicast", set(8+8, 'X'), true},
		{"no authentication", multicast, "v2-multicast", set(4, 0), true},
		{"another VIP", multicast, "v2-multicast", set(8+4+3, 103), true},
		{"one VIP less", multicast, "v2-multicast", set(3, 1), true},
		{"VRRPv3", multicast, "v2-multicast", set(0, 0x31), true},
		{"another priority: still a member", multicast, "v2-multicast", set(2, 1), false},
		{"another deployment's router id", multicast, "v2-multicast", set(1, 99), false},
		{"a member's v3 IPv6 advert", multicast, "v3-ipv6", nil, false},
		{"IPv6: another VIP", multicast, "v3-ipv6", set(8+16+15, 0x02), true},
		{"IPv6: VRRPv2", multicast, "v3-ipv6", set(0, 0x21), true},
		{"a unicast peer's advert", unicast, "v2-unicast", nil, false},
		{"not from a unicast peer", unicast, "v2-unicast", func(in []byte, _ int) { in[15] = 99 }, true},
		// A heartbeat: router id 0, whoever sends it.
		{"a heartbeat", multicast, "v2-multicast", func(in []byte, at int) { copy(in[at:], heartbeatPacket(netip.Addr{}, netip.Addr{})) }, true},
		{"a unicast peer's heartbeat", unicast, "v2-unicast", func(in []byte, at int) { copy(in[at:], heartbeatPacket(netip.Addr{}, netip.Addr{})) }, true},
		{"IPv6: a heartbeat", multicast, "v3-ipv6", func(in []byte, at int) { copy(in[at:], heartbeatPacket(netip.Addr{}, netip.Addr{})) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, advert, v6 := filterInput(t, frames[tt.frame])
			if tt.change != nil {
				tt.change(in, len(in)-len(advert))
			}
			prog := advertFilter(tt.expect, v6)
			if prog == nil {
				t.Fatal("no filter")
			}
			if got := runFilter(t, prog, in); got != tt.pass {
				t.Errorf("pass = %v, want %v", got, tt.pass)
			}
		})
	}
}

func unicastPlan(t testing.TB) *plan.Plan {
	t.Helper()
	// The node is 192.0.2.12: its peer, 192.0.2.11, sent the capture.
	return testPlanOn(t, unicastRaw, "192.0.2.12/24")
}

// TestAdvertFilterSize: 254 instances of one VIP each, the most a
// deployment has, fit in the kernel's limit; a program that would not is
// left off rather than cut.
func TestAdvertFilterSize(t *testing.T) {
	e := expectations(testPlan(t, config.Raw{VirtualIPs: "198.51.100.1-254", Offset: "0"}))
	prog := advertFilter(e, false)
	if prog == nil || len(prog) > maxFilterLen {
		t.Fatalf("254 instances: %d instructions", len(prog))
	}
	t.Logf("254 single-VIP instances: %d instructions", len(prog))
	if _, err := bpf.Assemble(prog); err != nil {
		t.Fatal(err)
	}
	// 254 instances of four VIPs each, 1,016 VIPs, with ten unicast
	// peers: the ten-node scale row of the bench.
	four := map[key]expectation{}
	var peers []netip.Addr
	for j := range 10 {
		peers = append(peers, netip.AddrFrom4([4]byte{192, 0, 2, byte(11 + j)}))
	}
	for i := range 254 {
		var vips []netip.Addr
		for j := range 4 {
			vips = append(vips, netip.AddrFrom4([4]byte{198, 51, byte(100 + j), byte(i + 1)}))
		}
		four[key{vrid: i + 1}] = expectation{version: 3, vips: vips, order: vips, peers: peers}
	}
	prog = advertFilter(four, false)
	if prog == nil {
		t.Fatal("254 instances of four VIPs: no filter")
	}
	t.Logf("254 instances of four VIPs, ten peers: %d instructions", len(prog))
	if _, err := bpf.Assemble(prog); err != nil {
		t.Fatal(err)
	}
	// 254 instances of 6 VIPs each: too long.
	big := map[key]expectation{}
	for i := range 254 {
		var vips []netip.Addr
		for j := range 6 {
			vips = append(vips, netip.AddrFrom4([4]byte{10, byte(j), 0, byte(i)}))
		}
		big[key{vrid: i + 1}] = expectation{version: 2, vips: vips, order: vips}
	}
	if prog := advertFilter(big, false); prog != nil {
		t.Errorf("a filter of %d instructions for 254 instances of 6 VIPs", len(prog))
	}
}

// FuzzAdvertFilter: the filter only drops what the program would not count
// as foreign. Whatever the bytes, a dropped advert is either for another
// deployment's router id or one whose differences are none.
func FuzzAdvertFilter(f *testing.F) {
	frames := capturedAdverts(f)
	for _, name := range []string{"v2-multicast", "v2-unicast", "v3-ipv6"} {
		in, _, v6 := filterInput(f, frames[name])
		f.Add(in, v6, name == "v2-unicast")
	}
	multicast := expectations(testPlan(f, multicastRaw))
	unicast := expectations(unicastPlan(f))
	progs := map[[2]bool][]bpf.Instruction{}
	for _, v6 := range []bool{false, true} {
		progs[[2]bool{v6, false}] = advertFilter(multicast, v6)
		progs[[2]bool{v6, true}] = advertFilter(unicast, v6)
	}
	f.Fuzz(func(t *testing.T, in []byte, v6, uni bool) {
		expect := multicast
		if uni {
			expect = unicast
		}
		prog := progs[[2]bool{v6, uni}]
		if prog == nil || runFilter(t, prog, in) {
			return // no filter for the family, or passed
		}
		// Dropped: what would the program have made of it?
		advert, src := in, netip.Addr{}
		if !v6 {
			if len(in) < 20 || in[0]>>4 != 4 {
				return // not an IPv4 packet: the kernel never shows one
			}
			ihl := int(in[0]&0x0f) * 4
			if ihl < 20 || len(in) < ihl {
				return
			}
			src = netip.AddrFrom4([4]byte(in[12:16]))
			advert = in[ihl:]
		}
		a, err := parseAdvert(advert, v6)
		if err != nil {
			return // the program ignores it too
		}
		e, ok := expect[key{v6: v6, vrid: a.vrid}]
		if !ok {
			return
		}
		if d := e.differences(a, src); len(d) > 0 {
			t.Fatalf("dropped %x, a foreign advert: %v", in, d)
		}
	})
}

// TestAdvertFilterBlocks: an instance whose block fits the 8-bit skips
// (four VIPs) and one that does not (130 VIPs, the long form) each drop
// their members' adverts and pass any that differs, beside each other in
// one program.
func TestAdvertFilterBlocks(t *testing.T) {
	peer := netip.MustParseAddr("192.0.2.11")
	expect := map[key]expectation{}
	for vrid, count := range map[int]int{7: 4, 8: 130, 9: 4} {
		var vips []netip.Addr
		for j := range count {
			vips = append(vips, netip.AddrFrom4([4]byte{198, 51, byte(100 + vrid), byte(j + 1)}))
		}
		expect[key{vrid: vrid}] = expectation{version: 3, vips: vips, order: vips, peers: []netip.Addr{peer}}
	}
	prog := advertFilter(expect, false)
	if prog == nil {
		t.Fatal("no filter")
	}
	// packet is a member's advert of vrid: an IPv4 header, then VRRPv3.
	packet := func(vrid int) []byte {
		e := expect[key{vrid: vrid}]
		b := make([]byte, 20, 20+8+4*len(e.order))
		b[0] = 0x45
		copy(b[12:16], peer.AsSlice())
		b = append(b, 0x31, byte(vrid), 100, byte(len(e.order)), 0, 20, 0, 0)
		for _, v := range e.order {
			b = append(b, v.AsSlice()...)
		}
		return b
	}
	for _, vrid := range []int{7, 8, 9} {
		n := len(expect[key{vrid: vrid}].order)
		tests := []struct {
			name   string
			change func([]byte)
			pass   bool
		}{
			{"a member's advert", nil, false},
			{"the first VIP differs", func(b []byte) { b[20+8+3]++ }, true},
			{"the last VIP differs", func(b []byte) { b[20+8+4*n-1]++ }, true},
			{"another count", func(b []byte) { b[20+3]-- }, true},
			{"another deployment's router id", func(b []byte) { b[20+1] = 99 }, false},
		}
		for _, tt := range tests {
			b := packet(vrid)
			if tt.change != nil {
				tt.change(b)
			}
			if got := runFilter(t, prog, b); got != tt.pass {
				t.Errorf("vrid %d (%d VIPs), %s: pass = %v, want %v", vrid, n, tt.name, got, tt.pass)
			}
		}
	}
}
