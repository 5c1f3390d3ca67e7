package splitbrain

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// The packets the guard sends and reads, built and decoded with gopacket:
// ARP probes and replies (IPv4), neighbour solicitations and advertisements
// (IPv6), and VRRP adverts (v2 through gopacket's layer, v3 by hand:
// gopacket has no layer for it).

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	serializeOpt = gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
)

// arpProbe is an RFC 5227 ARP probe for vip from mac: a broadcast request
// with sender address 0.0.0.0, so that no host learns a mapping from it,
// which every host that has vip answers with a reply to mac.
func arpProbe(mac net.HardwareAddr, vip netip.Addr) ([]byte, error) {
	eth := &layers.Ethernet{SrcMAC: mac, DstMAC: broadcastMAC, EthernetType: layers.EthernetTypeARP}
	arp := &layers.ARP{
		AddrType:          layers.LinkTypeEthernet,
		Protocol:          layers.EthernetTypeIPv4,
		HwAddressSize:     6,
		ProtAddressSize:   4,
		Operation:         layers.ARPRequest,
		SourceHwAddress:   mac,
		SourceProtAddress: []byte{0, 0, 0, 0},
		DstHwAddress:      make([]byte, 6),
		DstProtAddress:    vip.AsSlice(),
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpt, eth, arp); err != nil {
		return nil, fmt.Errorf("building the ARP probe for %s: %w", vip, err)
	}
	return buf.Bytes(), nil
}

// solicitedNode returns the solicited-node multicast address of a and its
// Ethernet group address (RFC 4291 2.7.1, RFC 2464 7).
func solicitedNode(a netip.Addr) (netip.Addr, net.HardwareAddr) {
	b := a.As16()
	group := [16]byte{0xff, 0x02, 10: 0, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]}
	return netip.AddrFrom16(group), net.HardwareAddr{0x33, 0x33, 0xff, b[13], b[14], b[15]}
}

// nsProbe is a duplicate address detection probe for vip from mac (RFC 4862
// 5.4.2): a neighbour solicitation from the unspecified address to vip's
// solicited-node group, without a source link-layer option. Every host that
// has vip answers with an advertisement to all nodes. It returns the frame
// and its destination MAC.
func nsProbe(mac net.HardwareAddr, vip netip.Addr) ([]byte, net.HardwareAddr, error) {
	group, groupMAC := solicitedNode(vip)
	eth := &layers.Ethernet{SrcMAC: mac, DstMAC: groupMAC, EthernetType: layers.EthernetTypeIPv6}
	ip6 := &layers.IPv6{
		Version:    6,
		NextHeader: layers.IPProtocolICMPv6,
		HopLimit:   255,
		SrcIP:      net.IPv6unspecified,
		DstIP:      group.AsSlice(),
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip6); err != nil {
		return nil, nil, err
	}
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: vip.AsSlice()}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, serializeOpt, eth, ip6, icmp, ns); err != nil {
		return nil, nil, fmt.Errorf("building the neighbour solicitation for %s: %w", vip, err)
	}
	return buf.Bytes(), groupMAC, nil
}

// claim is one host saying that it has an address: the address and the
// host's link-layer address.
type claim struct {
	addr netip.Addr
	mac  net.HardwareAddr
}

// arpDecoder reads ARP frames.
type arpDecoder struct {
	eth    layers.Ethernet
	arp    layers.ARP
	parser *gopacket.DecodingLayerParser
	layers []gopacket.LayerType
}

func newARPDecoder() *arpDecoder {
	d := &arpDecoder{}
	d.parser = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &d.eth, &d.arp)
	d.parser.IgnoreUnsupported = true
	return d
}

// claims returns what an ARP frame says about who has which address: the
// sender of a reply, of a gratuitous request or announcement (sender and
// target address the same) and of any request has its sender address; the
// sender of a probe (sender address 0.0.0.0) is about to take its target
// address, or holds it and checks, as this program does. A frame without a
// usable sender gives nothing.
func (d *arpDecoder) claims(frame []byte) []claim {
	if err := d.parser.DecodeLayers(frame, &d.layers); err != nil || len(d.layers) < 2 {
		return nil
	}
	a := &d.arp
	if a.AddrType != layers.LinkTypeEthernet || a.Protocol != layers.EthernetTypeIPv4 || a.HwAddressSize != 6 || a.ProtAddressSize != 4 {
		return nil
	}
	mac := net.HardwareAddr(bytes.Clone(a.SourceHwAddress))
	sender, _ := netip.AddrFromSlice(a.SourceProtAddress)
	target, _ := netip.AddrFromSlice(a.DstProtAddress)
	switch {
	case sender.IsUnspecified() && a.Operation == layers.ARPRequest:
		return []claim{{target, mac}}
	case sender.IsValid() && !sender.IsUnspecified():
		return []claim{{sender, mac}}
	}
	return nil
}

// ndpDecoder reads ICMPv6 messages as a raw ICMPv6 socket delivers them
// (without the IPv6 header).
type ndpDecoder struct {
	icmp   layers.ICMPv6
	na     layers.ICMPv6NeighborAdvertisement
	parser *gopacket.DecodingLayerParser
	layers []gopacket.LayerType
}

func newNDPDecoder() *ndpDecoder {
	d := &ndpDecoder{}
	d.parser = gopacket.NewDecodingLayerParser(layers.LayerTypeICMPv6, &d.icmp, &d.na)
	d.parser.IgnoreUnsupported = true
	return d
}

// claims returns the claim of a neighbour advertisement: its target
// address, with the target link-layer address option (every advertisement
// Linux and keepalived send to all nodes has one). Other messages give
// nothing.
func (d *ndpDecoder) claims(msg []byte) []claim {
	if err := d.parser.DecodeLayers(msg, &d.layers); err != nil || len(d.layers) < 2 || d.layers[1] != layers.LayerTypeICMPv6NeighborAdvertisement {
		return nil
	}
	target, ok := netip.AddrFromSlice(d.na.TargetAddress)
	if !ok {
		return nil
	}
	for _, o := range d.na.Options {
		if o.Type == layers.ICMPv6OptTargetAddress && len(o.Data) == 6 {
			return []claim{{target, net.HardwareAddr(bytes.Clone(o.Data))}}
		}
	}
	return nil
}

// advert is the part of a VRRP advertisement that says whose it is.
type advert struct {
	version  int
	vrid     int
	priority int
	// authType and auth are VRRPv2's authentication type and its 8 bytes
	// of authentication data; VRRPv3 has neither.
	authType int
	auth     [8]byte
	addrs    []netip.Addr
}

var errNotAdvert = errors.New("not a VRRP advertisement")

// parseAdvert decodes a VRRP message as a raw socket delivers it (the IPv4
// header stripped, or an IPv6 payload). v6 says which family the addresses
// are. VRRPv2 (RFC 3768, IPv4 only) goes through gopacket's layer; VRRPv3
// (RFC 5798) is decoded here: version and type, router id, priority,
// address count, 4 reserved bits and a 12-bit interval in centiseconds,
// the checksum, then the addresses.
func parseAdvert(b []byte, v6 bool) (advert, error) {
	if len(b) < 8 {
		return advert{}, fmt.Errorf("%w: %d bytes", errNotAdvert, len(b))
	}
	switch b[0] >> 4 {
	case 2:
		if v6 {
			return advert{}, fmt.Errorf("%w: VRRPv2 over IPv6", errNotAdvert)
		}
		var v layers.VRRPv2
		if err := v.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			return advert{}, fmt.Errorf("%w: %w", errNotAdvert, err)
		}
		a := advert{version: 2, vrid: int(v.VirtualRtrID), priority: int(v.Priority), authType: int(v.AuthType)}
		for _, ip := range v.IPAddress {
			addr, _ := netip.AddrFromSlice(ip)
			a.addrs = append(a.addrs, addr)
		}
		// The authentication data follows the addresses; the layer
		// leaves it to the caller.
		copy(a.auth[:], b[8+4*len(v.IPAddress):])
		return a, nil
	case 3:
		if b[0]&0x0f != 1 {
			return advert{}, fmt.Errorf("%w: VRRPv3 type %d", errNotAdvert, b[0]&0x0f)
		}
		size := 4
		if v6 {
			size = 16
		}
		n := int(b[3])
		if len(b) < 8+n*size {
			return advert{}, fmt.Errorf("%w: %d addresses do not fit in %d bytes", errNotAdvert, n, len(b))
		}
		a := advert{version: 3, vrid: int(b[1]), priority: int(b[2])}
		for i := range n {
			addr, _ := netip.AddrFromSlice(b[8+i*size : 8+(i+1)*size])
			a.addrs = append(a.addrs, addr)
		}
		return a, nil
	}
	return advert{}, fmt.Errorf("%w: version %d", errNotAdvert, b[0]>>4)
}
