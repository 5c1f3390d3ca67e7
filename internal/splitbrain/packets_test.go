package splitbrain

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	// serializeOpt is how the tests build packets with gopacket, the
	// oracle the hand-written codec is checked against.
	serializeOpt = gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// capturedAdverts reads testdata/adverts.txt: frames keepalived sent.
func capturedAdverts(t testing.TB) map[string][]byte {
	t.Helper()
	f, err := os.Open("testdata/adverts.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, h, _ := strings.Cut(line, " ")
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = b
	}
	return out
}

// ipPayload returns what a raw IP socket delivers for a frame: the source
// address and the payload after the IP header, without Ethernet padding.
func ipPayload(t testing.TB, frame []byte) (netip.Addr, []byte, bool) {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if l, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		src, _ := netip.AddrFromSlice(l.SrcIP)
		return src, l.Payload, false
	}
	if l, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		src, _ := netip.AddrFromSlice(l.SrcIP)
		return src, l.Payload, true
	}
	t.Fatalf("no IP layer in %x", frame)
	return netip.Addr{}, nil, false
}

// TestParseCapturedAdverts decodes adverts the real keepalived sent.
func TestParseCapturedAdverts(t *testing.T) {
	frames := capturedAdverts(t)
	var openShif, abc [8]byte
	copy(openShif[:], "OpenShif")
	copy(abc[:], "abc")
	tests := []struct {
		name string
		src  string
		want advert
	}{
		{"v2-multicast", "192.0.2.11", advert{version: 2, vrid: 11, priority: 200, authType: 1, auth: openShif, interval: time.Second, addrs: addrs("192.0.2.100", "192.0.2.102")}},
		{"v2-unicast", "192.0.2.11", advert{version: 2, vrid: 13, priority: 250, authType: 1, auth: abc, interval: time.Second, addrs: addrs("192.0.2.103")}},
		{"v3-ipv4", "192.0.2.11", advert{version: 3, vrid: 21, priority: 200, interval: 100 * time.Millisecond, addrs: addrs("192.0.2.110")}},
		{"v3-ipv6", "fe80::8480:f0ff:fe4c:4626", advert{version: 3, vrid: 12, priority: 250, interval: time.Second, addrs: addrs("2001:db8::100", "2001:db8::101")}},
		{"v3-ipv6-slow", "fe80::8480:f0ff:fe4c:4626", advert{version: 3, vrid: 22, priority: 200, interval: 500 * time.Millisecond, addrs: addrs("2001:db8::110")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame, ok := frames[tt.name]
			if !ok {
				t.Fatalf("no frame %s in testdata/adverts.txt", tt.name)
			}
			src, payload, v6 := ipPayload(t, frame)
			if src.String() != tt.src {
				t.Errorf("source %s, want %s", src, tt.src)
			}
			got, err := parseAdvert(payload, v6)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(advert{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestParseAdvertRefuses(t *testing.T) {
	frames := capturedAdverts(t)
	_, v2, _ := ipPayload(t, frames["v2-multicast"])
	_, v3, _ := ipPayload(t, frames["v3-ipv6"])
	with := func(b []byte, i int, v byte) []byte {
		c := append([]byte(nil), b...)
		c[i] = v
		return c
	}
	tests := []struct {
		name string
		b    []byte
		v6   bool
	}{
		{"empty", nil, false},
		{"short", v2[:7], false},
		{"version 1", with(v2, 0, 0x11), false},
		{"version 4", with(v3, 0, 0x41), true},
		{"v2 over IPv6", v2, true},
		{"v2 of another type", with(v2, 0, 0x22), false},
		{"v2 with no address", with(v2, 3, 0), false},
		{"v2 with more addresses than bytes", with(v2, 3, 9), false},
		{"v3 of another type", with(v3, 0, 0x32), true},
		{"v3 with more addresses than bytes", with(v3, 3, 3), true},
		{"v3 IPv6 read as IPv4 addresses, cut", v3[:8+4], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a, err := parseAdvert(tt.b, tt.v6); err == nil {
				t.Errorf("parseAdvert(%x) = %+v, want an error", tt.b, a)
			}
		})
	}
}

func FuzzParseAdvert(f *testing.F) {
	for _, frame := range capturedAdverts(f) {
		_, payload, v6 := ipPayload(f, frame)
		f.Add(payload, v6)
	}
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		a, err := parseAdvert(b, v6)
		if err != nil {
			return
		}
		if a.version != 2 && a.version != 3 || len(a.addrs) == 0 && a.version == 2 || a.vrid != int(b[1]) {
			t.Fatalf("parseAdvert(%x) = %+v", b, a)
		}
		for _, ad := range a.addrs {
			if ad.Is6() != v6 {
				t.Fatalf("parseAdvert(%x, v6=%v) gave address %s", b, v6, ad)
			}
		}
	})
}

// TestARPProbe builds a probe and reads it back with gopacket: an RFC 5227
// probe (a broadcast request from 0.0.0.0 with our MAC, for the VIP).
func TestARPProbe(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.100")
	frame, err := arpProbe(macA, vip)
	if err != nil {
		t.Fatal(err)
	}
	arp := broadcastARP(t, frame, macA)
	if arp.Operation != layers.ARPRequest || net.IP(arp.SourceProtAddress).String() != "0.0.0.0" ||
		net.HardwareAddr(arp.SourceHwAddress).String() != macA.String() || net.IP(arp.DstProtAddress).String() != vip.String() ||
		net.HardwareAddr(arp.DstHwAddress).String() != "00:00:00:00:00:00" {
		t.Errorf("ARP %+v, want a request from 0.0.0.0 %s for %s", arp, macA, vip)
	}
}

// broadcastARP decodes frame with gopacket: an ARP frame from mac to
// every host.
func broadcastARP(t *testing.T, frame []byte, mac net.HardwareAddr) *layers.ARP {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if eth == nil || arp == nil {
		t.Fatalf("not Ethernet and ARP: %v", p)
	}
	if eth.DstMAC.String() != "ff:ff:ff:ff:ff:ff" || eth.SrcMAC.String() != mac.String() {
		t.Errorf("Ethernet %s -> %s, want %s -> broadcast", eth.SrcMAC, eth.DstMAC, mac)
	}
	return arp
}

func arpFrame(t *testing.T, op uint16, sha net.HardwareAddr, spa string, tha net.HardwareAddr, tpa string) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, serializeOpt,
		&layers.Ethernet{SrcMAC: sha, DstMAC: broadcastMAC, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: sha, SourceProtAddress: netip.MustParseAddr(spa).AsSlice(),
			DstHwAddress: tha, DstProtAddress: netip.MustParseAddr(tpa).AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestARPClaims(t *testing.T) {
	zero := make(net.HardwareAddr, 6)
	probe, err := arpProbe(macB, netip.MustParseAddr("192.0.2.100"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		frame []byte
		want  []claim
	}{
		{"reply to a probe", arpFrame(t, layers.ARPReply, macB, "192.0.2.100", macA, "0.0.0.0"), []claim{{netip.MustParseAddr("192.0.2.100"), macB}}},
		{"gratuitous request", arpFrame(t, layers.ARPRequest, macB, "192.0.2.100", zero, "192.0.2.100"), []claim{{netip.MustParseAddr("192.0.2.100"), macB}}},
		{"another host's probe", probe, []claim{{netip.MustParseAddr("192.0.2.100"), macB}}},
		{"request from a node address", arpFrame(t, layers.ARPRequest, macB, "192.0.2.12", zero, "192.0.2.100"), []claim{{netip.MustParseAddr("192.0.2.12"), macB}}},
		{"not ARP", []byte{1, 2, 3}, nil},
	}
	d := newARPDecoder()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := d.claims(tt.frame)
			if diff := cmp.Diff(tt.want, got, cmpClaims...); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestNSProbe builds a neighbour solicitation and reads it back: DAD form
// (from ::, to the solicited-node group, hop limit 255, no options) with a
// checksum that gopacket's own serialisation of the same layers agrees with.
func TestNSProbe(t *testing.T) {
	vip := netip.MustParseAddr("2001:db8::1f39")
	frame, to, err := nsProbe(macA, vip)
	if err != nil {
		t.Fatal(err)
	}
	if to.String() != "33:33:ff:00:1f:39" {
		t.Errorf("destination MAC %s, want 33:33:ff:00:1f:39", to)
	}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	ns, _ := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	if eth == nil || ip6 == nil || icmp == nil || ns == nil {
		t.Fatalf("not a neighbour solicitation: %v", p)
	}
	if eth.DstMAC.String() != to.String() || eth.SrcMAC.String() != macA.String() {
		t.Errorf("Ethernet %s -> %s", eth.SrcMAC, eth.DstMAC)
	}
	if !ip6.SrcIP.IsUnspecified() || ip6.DstIP.String() != "ff02::1:ff00:1f39" || ip6.HopLimit != 255 {
		t.Errorf("IPv6 %s -> %s hop limit %d, want :: -> ff02::1:ff00:1f39 hop limit 255", ip6.SrcIP, ip6.DstIP, ip6.HopLimit)
	}
	if ns.TargetAddress.String() != vip.String() || len(ns.Options) != 0 {
		t.Errorf("target %s options %v, want %s and none", ns.TargetAddress, ns.Options, vip)
	}
	// The checksum: the RFC 4443 sum over the pseudo-header and the
	// message, computed here independently.
	msg := frame[14+40:]
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	add(ip6.SrcIP)
	add(ip6.DstIP)
	add([]byte{0, 0, byte(len(msg) >> 8), byte(len(msg)), 0, 0, 0, 58})
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("ICMPv6 checksum %#04x does not verify (sum %#x)", icmp.Checksum, sum)
	}
}

// TestNSQuestion: the probe of a held IPv6 VIP comes from the node's
// link-local address and carries its MAC, so a holder answers the node
// alone; gopacket decodes it, and the checksum verifies with gopacket's own.
func TestNSQuestion(t *testing.T) {
	vip := netip.MustParseAddr("2001:db8::1f39")
	src := netip.MustParseAddr("fe80::a")
	frame, to, err := nsQuestion(macA, src, vip)
	if err != nil {
		t.Fatal(err)
	}
	if to.String() != "33:33:ff:00:1f:39" {
		t.Errorf("destination MAC %s, want 33:33:ff:00:1f:39", to)
	}
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	ns, _ := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	if ip6 == nil || icmp == nil || ns == nil {
		t.Fatalf("not a neighbour solicitation: %v", p)
	}
	if ip6.SrcIP.String() != "fe80::a" || ip6.DstIP.String() != "ff02::1:ff00:1f39" || ip6.HopLimit != 255 {
		t.Errorf("IPv6 %s -> %s hop limit %d, want fe80::a -> ff02::1:ff00:1f39 hop limit 255", ip6.SrcIP, ip6.DstIP, ip6.HopLimit)
	}
	want := layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: []byte(macA)}}
	if ns.TargetAddress.String() != vip.String() || len(ns.Options) != 1 || ns.Options[0].Type != want[0].Type || !bytes.Equal(ns.Options[0].Data, want[0].Data) {
		t.Errorf("target %s options %v, want %s and %v", ns.TargetAddress, ns.Options, vip, want)
	}
	// gopacket computes the checksum of the same message: they agree.
	again := &layers.ICMPv6{TypeCode: icmp.TypeCode}
	if err := again.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, again, ns); err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint16(buf.Bytes()[2:4]); got != icmp.Checksum {
		t.Errorf("checksum %#04x, gopacket's %#04x", icmp.Checksum, got)
	}
	if _, _, err := nsQuestion(macA, netip.MustParseAddr("192.0.2.1"), vip); err == nil {
		t.Error("an IPv4 source: no error")
	}
}

func naMessage(t *testing.T, target string, opts layers.ICMPv6Options) []byte {
	t.Helper()
	src := net.ParseIP("fe80::b")
	ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: src, DstIP: net.ParseIP("ff02::1")}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpt, icmp,
		&layers.ICMPv6NeighborAdvertisement{Flags: 0x20, TargetAddress: net.ParseIP(target), Options: opts}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestNDPClaims(t *testing.T) {
	tlla := layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: macB}}
	ns := func() []byte {
		frame, _, err := nsProbe(macB, netip.MustParseAddr("2001:db8::100"))
		if err != nil {
			t.Fatal(err)
		}
		return frame[14+40:]
	}()
	tests := []struct {
		name string
		msg  []byte
		want []claim
	}{
		{"advertisement with the target's MAC", naMessage(t, "2001:db8::100", tlla), []claim{{netip.MustParseAddr("2001:db8::100"), macB}}},
		{"advertisement without it", naMessage(t, "2001:db8::100", nil), nil},
		{"a solicitation", ns, nil},
		{"garbage", []byte{136}, nil},
	}
	d := newNDPDecoder()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := d.claims(tt.msg)
			if diff := cmp.Diff(tt.want, got, cmpClaims...); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestARPFilter runs the kernel's filter of the ARP socket in x/net/bpf's
// virtual machine: replies, announcements and probes for a VIP this node
// holds pass; ordinary requests and probes for other addresses do not.
func TestARPFilter(t *testing.T) {
	held := addrs("192.0.2.101", "192.0.2.100", "2001:db8::100")
	for i := range 250 {
		held = append(held, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}))
	}
	other, err := arpProbe(macB, netip.MustParseAddr("192.0.2.102"))
	if err != nil {
		t.Fatal(err)
	}
	last, err := arpProbe(macB, netip.MustParseAddr("198.51.100.249"))
	if err != nil {
		t.Fatal(err)
	}
	zero := make(net.HardwareAddr, 6)
	probe, err := arpProbe(macB, netip.MustParseAddr("192.0.2.100"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []filterCase{
		{"reply for a held VIP", arpFrame(t, layers.ARPReply, macB, "192.0.2.100", macA, "0.0.0.0"), true},
		{"reply for the last held VIP", arpFrame(t, layers.ARPReply, macB, "198.51.100.249", macA, "192.0.2.11"), true},
		{"probe for a held VIP", probe, true},
		{"probe for the last held VIP", last, true},
		{"probe for another address", other, false},
		{"ordinary reply", arpFrame(t, layers.ARPReply, macB, "192.0.2.12", macA, "192.0.2.11"), false},
		{"gratuitous request for a held VIP", arpFrame(t, layers.ARPRequest, macB, "192.0.2.100", zero, "192.0.2.100"), true},
		{"gratuitous request for another address", arpFrame(t, layers.ARPRequest, macB, "192.0.2.102", zero, "192.0.2.102"), false},
		{"ordinary request", arpFrame(t, layers.ARPRequest, macB, "192.0.2.12", zero, "192.0.2.100"), false},
	}
	filterCases(t, arpProgram(held), tests)
}

// filterCase is a packet a kernel filter should pass or drop.
type filterCase struct {
	name  string
	frame []byte
	pass  bool
}

// filterCases runs each case through prog in x/net/bpf's machine.
func filterCases(t *testing.T, prog []bpf.Instruction, tests []filterCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runFilter(t, prog, tt.frame); got != tt.pass {
				t.Errorf("filter passes it: %v, want %v", got, tt.pass)
			}
		})
	}
}

// TestNDPFilter runs the kernel's filter of the ICMPv6 socket: neighbour
// advertisements and duplicate address detection probes pass, ordinary
// solicitations (with the sender's link-layer address) do not.
func TestNDPFilter(t *testing.T) {
	probe, _, err := nsProbe(macB, netip.MustParseAddr("2001:db8::100"))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func() []byte {
		ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: net.ParseIP("2001:db8::fe"), DstIP: net.ParseIP("ff02::1:ff00:100")}
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
		if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, serializeOpt, icmp, &layers.ICMPv6NeighborSolicitation{
			TargetAddress: net.ParseIP("2001:db8::100"),
			Options:       layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: macB}},
		}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}()
	tests := []filterCase{
		{"advertisement", naMessage(t, "2001:db8::100", layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: macB}}), true},
		{"duplicate address detection probe", probe[14+40:], true},
		{"a client resolving a VIP", resolve, false},
		{"an echo request", []byte{128, 0, 0, 0, 0, 1, 0, 1}, false},
	}
	filterCases(t, ndpProgram, tests)
}

// TestNDPClaimsFrom: a duplicate address detection probe (a solicitation
// from ::) claims its target, without a MAC; a solicitation from an
// address is someone resolving, not a claim; advertisements are decoded as
// by claims.
func TestNDPClaimsFrom(t *testing.T) {
	probe, _, err := nsProbe(macB, netip.MustParseAddr("2001:db8::100"))
	if err != nil {
		t.Fatal(err)
	}
	from := func(s string) net.Addr { return &net.IPAddr{IP: net.ParseIP(s)} }
	tests := []struct {
		name string
		msg  []byte
		from net.Addr
		want []claim
	}{
		{"a probe", probe[14+40:], from("::"), []claim{{addr: netip.MustParseAddr("2001:db8::100")}}},
		{"a solicitation from an address", probe[14+40:], from("2001:db8::fe"), nil},
		{"an advertisement", naMessage(t, "2001:db8::100", layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: macB}}), from("fe80::b"),
			[]claim{{netip.MustParseAddr("2001:db8::100"), macB}}},
		{"a cut solicitation", probe[14+40 : 14+40+10], from("::"), nil},
	}
	d := newNDPDecoder()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, d.claimsFrom(tt.msg, tt.from), cmpClaims...); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestARPAnnouncement builds a gratuitous ARP and reads it back with
// gopacket: a broadcast request from mac whose sender and target addresses
// are the VIP.
func TestARPAnnouncement(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.100")
	frame, err := arpAnnouncement(macA, vip)
	if err != nil {
		t.Fatal(err)
	}
	arp := broadcastARP(t, frame, macA)
	if arp.Operation != layers.ARPRequest || net.IP(arp.SourceProtAddress).String() != vip.String() ||
		net.HardwareAddr(arp.SourceHwAddress).String() != macA.String() || net.IP(arp.DstProtAddress).String() != vip.String() {
		t.Errorf("ARP %+v, want a request from %s %s for itself", arp, vip, macA)
	}
	// Other guards read it as the claim it is.
	if diff := cmp.Diff([]claim{{vip, macA}}, newARPDecoder().claims(frame), cmpClaims...); diff != "" {
		t.Errorf("claims (-want +got)\n%s", diff)
	}
	if _, err := arpAnnouncement(macA, netip.MustParseAddr("2001:db8::1")); err == nil {
		t.Error("an ARP announcement of an IPv6 address")
	}
}

// TestNAAnnouncement builds an unsolicited neighbour advertisement and reads
// it back with gopacket: from the VIP to all nodes, hop limit 255, override
// (and router when asked), the MAC in the target link-layer option, and a
// checksum gopacket's own serialisation of the same layers agrees with.
func TestNAAnnouncement(t *testing.T) {
	vip := netip.MustParseAddr("2001:db8::1f39")
	for _, router := range []bool{false, true} {
		frame, err := naAnnouncement(macA, vip, router)
		if err != nil {
			t.Fatal(err)
		}
		p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		ip6, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		na, _ := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
		if eth == nil || ip6 == nil || icmp == nil || na == nil {
			t.Fatalf("not a neighbour advertisement: %v", p)
		}
		if eth.DstMAC.String() != "33:33:00:00:00:01" || eth.SrcMAC.String() != macA.String() {
			t.Errorf("Ethernet %s -> %s", eth.SrcMAC, eth.DstMAC)
		}
		if ip6.SrcIP.String() != vip.String() || ip6.DstIP.String() != "ff02::1" || ip6.HopLimit != 255 {
			t.Errorf("IPv6 %s -> %s hop limit %d", ip6.SrcIP, ip6.DstIP, ip6.HopLimit)
		}
		if !na.Override() || na.Solicited() || na.Router() != router || na.TargetAddress.String() != vip.String() {
			t.Errorf("flags %#x target %s, want override, router %v, not solicited, for %s", na.Flags, na.TargetAddress, router, vip)
		}
		// gopacket serialises the same message; the checksums agree.
		want := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborAdvertisement, 0)}
		ipw := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: ip6.SrcIP, DstIP: ip6.DstIP}
		if err := want.SetNetworkLayerForChecksum(ipw); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, serializeOpt, ipw, want, &layers.ICMPv6NeighborAdvertisement{
			Flags: na.Flags, TargetAddress: na.TargetAddress,
			Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: macA}},
		}); err != nil {
			t.Fatal(err)
		}
		if got, want := frame[14:], buf.Bytes(); !bytes.Equal(got, want) {
			t.Errorf("router=%v: ours\n%x\ngopacket's\n%x", router, got, want)
		}
		// Other guards read it as the claim it is.
		if diff := cmp.Diff([]claim{{vip, macA}}, newNDPDecoder().claims(frame[14+40:]), cmpClaims...); diff != "" {
			t.Errorf("claims (-want +got)\n%s", diff)
		}
	}
	if _, err := naAnnouncement(macA, netip.MustParseAddr("192.0.2.1"), false); err == nil {
		t.Error("a neighbour advertisement of an IPv4 address")
	}
}
