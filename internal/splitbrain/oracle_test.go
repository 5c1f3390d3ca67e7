package splitbrain

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The codec of packets.go is checked against gopacket, the maintained
// library that decodes the same formats: on the frames the other tests
// build, and on whatever the fuzzer makes of them.

// gopacketARPClaims is arpDecoder.claims written with gopacket's layers.
func gopacketARPClaims(frame []byte) []claim {
	var (
		eth layers.Ethernet
		arp layers.ARP
		got []gopacket.LayerType
	)
	p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &arp)
	p.IgnoreUnsupported = true
	if err := p.DecodeLayers(frame, &got); err != nil || len(got) < 2 {
		return nil
	}
	if arp.AddrType != layers.LinkTypeEthernet || arp.Protocol != layers.EthernetTypeIPv4 || arp.HwAddressSize != 6 || arp.ProtAddressSize != 4 {
		return nil
	}
	mac := net.HardwareAddr(bytes.Clone(arp.SourceHwAddress))
	sender, _ := netip.AddrFromSlice(arp.SourceProtAddress)
	target, _ := netip.AddrFromSlice(arp.DstProtAddress)
	switch {
	case sender.IsUnspecified() && arp.Operation == layers.ARPRequest:
		return []claim{{target, mac}}
	case !sender.IsUnspecified() && (arp.Operation == layers.ARPRequest || arp.Operation == layers.ARPReply):
		return []claim{{sender, mac}}
	}
	return nil
}

// gopacketNDPClaims is ndpDecoder.claims written with gopacket's layers.
func gopacketNDPClaims(msg []byte) []claim {
	var (
		icmp layers.ICMPv6
		na   layers.ICMPv6NeighborAdvertisement
		got  []gopacket.LayerType
	)
	p := gopacket.NewDecodingLayerParser(layers.LayerTypeICMPv6, &icmp, &na)
	p.IgnoreUnsupported = true
	if err := p.DecodeLayers(msg, &got); err != nil || len(got) < 2 || got[1] != layers.LayerTypeICMPv6NeighborAdvertisement {
		return nil
	}
	if icmp.TypeCode.Code() != 0 {
		return nil
	}
	target, ok := netip.AddrFromSlice(na.TargetAddress)
	if !ok {
		return nil
	}
	for _, o := range na.Options {
		if o.Type == layers.ICMPv6OptTargetAddress && len(o.Data) == 6 {
			return []claim{{target, net.HardwareAddr(bytes.Clone(o.Data))}}
		}
	}
	return nil
}

var cmpClaims = []cmp.Option{cmp.AllowUnexported(claim{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })}

func FuzzARPClaimsAgreeWithGopacket(f *testing.F) {
	zero := make(net.HardwareAddr, 6)
	for _, fr := range [][]byte{
		arpFrame(&testing.T{}, layers.ARPReply, macB, "192.0.2.100", macA, "0.0.0.0"),
		arpFrame(&testing.T{}, layers.ARPRequest, macB, "192.0.2.100", zero, "192.0.2.100"),
	} {
		f.Add(fr)
	}
	probe, err := arpProbe(macA, netip.MustParseAddr("192.0.2.100"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(probe)
	f.Fuzz(func(t *testing.T, frame []byte) {
		want, got := gopacketARPClaims(frame), (&arpDecoder{}).claims(frame)
		if diff := cmp.Diff(want, got, cmpClaims...); diff != "" {
			t.Fatalf("claims of %x (-gopacket +ours):\n%s", frame, diff)
		}
	})
}

func FuzzNDPClaimsAgreeWithGopacket(f *testing.F) {
	f.Add(naMessage(&testing.T{}, "2001:db8::100", layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: macB}}))
	f.Add(naMessage(&testing.T{}, "2001:db8::1f39", layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: macA}, {Type: layers.ICMPv6OptTargetAddress, Data: macB}}))
	f.Fuzz(func(t *testing.T, msg []byte) {
		want, got := gopacketNDPClaims(msg), (&ndpDecoder{}).claims(msg)
		if diff := cmp.Diff(want, got, cmpClaims...); diff != "" {
			t.Fatalf("claims of %x (-gopacket +ours):\n%s", msg, diff)
		}
	})
}

// TestAdvertsAgreeWithGopacket decodes the captured VRRPv2 adverts with
// gopacket's layer too.
func TestAdvertsAgreeWithGopacket(t *testing.T) {
	for name, frame := range capturedAdverts(t) {
		_, payload, v6 := ipPayload(t, frame)
		if payload[0]>>4 != 2 {
			continue
		}
		var v layers.VRRPv2
		if err := v.DecodeFromBytes(payload, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("%s: gopacket: %v", name, err)
		}
		a, err := parseAdvert(payload, v6)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var want []netip.Addr
		for _, ip := range v.IPAddress {
			addr, _ := netip.AddrFromSlice(ip)
			want = append(want, addr)
		}
		if a.vrid != int(v.VirtualRtrID) || a.priority != int(v.Priority) || a.authType != int(v.AuthType) || !cmp.Equal(want, a.addrs, cmpClaims...) {
			t.Errorf("%s: ours %+v, gopacket %+v", name, a, v)
		}
	}
}
