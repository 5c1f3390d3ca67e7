package splitbrain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// The packets the guard sends and reads: ARP probes, replies and
// announcements (IPv4), neighbour solicitations and advertisements (IPv6),
// and VRRP adverts (v2 and v3). They are fixed formats of a few fields, written and read here
// with encoding/binary: gopacket's layers package, the maintained library
// that has them all, costs every node about 10 MB of memory for lookup
// tables the guard never uses (measured with the bench's RSS rows). The
// tests build and decode every packet with gopacket as well and compare,
// and the kernel tests have the real kernel answer the probes.

// Ethernet and the protocols on it.
const (
	ethHeaderLen  = 14
	ethTypeIPv4   = 0x0800
	ethTypeARP    = 0x0806
	ethTypeIPv6   = 0x86dd
	arpLen        = 28 // Ethernet/IPv4 ARP
	arpRequest    = 1
	arpReply      = 2
	ipv6HeaderLen = 40
	protoICMPv6   = 58
	icmpv6NS      = 135
	icmpv6NA      = 136
	nsLen         = 24 // type, code, checksum, reserved, target
	optSourceLL   = 1  // the source link-layer address option
	optTargetLL   = 2  // the target link-layer address option
	// The flags of a neighbour advertisement (RFC 4861 4.4).
	naRouter   = 0x80
	naOverride = 0x20
)

var (
	broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	// allNodes is ff02::1 and its Ethernet group address.
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
)

// ethernet writes an Ethernet header into b.
func ethernet(b []byte, dst, src net.HardwareAddr, typ uint16) {
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:14], typ)
}

// arpProbe is an RFC 5227 ARP probe for vip from mac: a broadcast request
// with sender address 0.0.0.0, so that no host learns a mapping from it,
// which every host that has vip answers with a reply to mac.
func arpProbe(mac net.HardwareAddr, vip netip.Addr) ([]byte, error) {
	if len(mac) != 6 || !vip.Is4() {
		return nil, fmt.Errorf("building the ARP probe for %s from %s: needs an IPv4 address and an Ethernet MAC", vip, mac)
	}
	b := make([]byte, ethHeaderLen+arpLen)
	ethernet(b, broadcastMAC, mac, ethTypeARP)
	a := b[ethHeaderLen:]
	binary.BigEndian.PutUint16(a[0:2], 1) // hardware type: Ethernet
	binary.BigEndian.PutUint16(a[2:4], ethTypeIPv4)
	a[4], a[5] = 6, 4 // address lengths
	binary.BigEndian.PutUint16(a[6:8], arpRequest)
	copy(a[8:14], mac) // sender MAC; sender address 0.0.0.0; target MAC zero
	v := vip.As4()
	copy(a[24:28], v[:])
	return b, nil
}

// arpAnnouncement is an RFC 5227 ARP announcement of vip by mac, the
// gratuitous ARP keepalived sends as it takes a VIP: a broadcast request
// whose sender and target addresses are both vip. Every host that has an
// entry for vip updates it to mac (Linux does even within its locktime).
func arpAnnouncement(mac net.HardwareAddr, vip netip.Addr) ([]byte, error) {
	b, err := arpProbe(mac, vip)
	if err != nil {
		return nil, err
	}
	v := vip.As4()
	copy(b[ethHeaderLen+14:ethHeaderLen+18], v[:])
	return b, nil
}

// withDst returns a copy of frame sent to dst instead: a probe asked of
// one host rather than of every host on the link.
func withDst(frame []byte, dst net.HardwareAddr) []byte {
	b := bytes.Clone(frame)
	copy(b[0:6], dst)
	return b
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
	if len(mac) != 6 || !vip.Is6() || vip.Is4In6() {
		return nil, nil, fmt.Errorf("building the neighbour solicitation for %s from %s: needs an IPv6 address and an Ethernet MAC", vip, mac)
	}
	group, groupMAC := solicitedNode(vip)
	b := make([]byte, ethHeaderLen+ipv6HeaderLen+nsLen)
	ethernet(b, groupMAC, mac, ethTypeIPv6)
	ip := b[ethHeaderLen:]
	ip[0] = 6 << 4 // version; traffic class and flow label 0
	binary.BigEndian.PutUint16(ip[4:6], nsLen)
	ip[6], ip[7] = protoICMPv6, 255 // next header, hop limit
	dst := group.As16()
	copy(ip[24:40], dst[:]) // source: the unspecified address
	msg := ip[ipv6HeaderLen:]
	msg[0] = icmpv6NS
	target := vip.As16()
	copy(msg[8:24], target[:])
	binary.BigEndian.PutUint16(msg[2:4], icmpv6Checksum(ip[8:24], ip[24:40], msg))
	return b, groupMAC, nil
}

// nsQuestion asks who else has vip, a VIP this node holds: a neighbour
// solicitation from src, the node's link-local address, to vip's
// solicited-node group, with mac in the source link-layer address option.
// A host that has vip answers this node alone, with a solicited
// advertisement (RFC 4861 7.2.4); nobody else learns anything about vip.
// (A duplicate address detection probe, from the unspecified address, is
// answered to all nodes with the override flag: every client on the link
// would send vip's packets to the host that answered, a dead node's kernel
// that still has the address, say, rather than to this node.) It returns
// the frame and its destination MAC.
func nsQuestion(mac net.HardwareAddr, src, vip netip.Addr) ([]byte, net.HardwareAddr, error) {
	if len(mac) != 6 || !vip.Is6() || vip.Is4In6() || !src.Is6() || src.Is4In6() {
		return nil, nil, fmt.Errorf("building the neighbour solicitation for %s from %s %s: needs IPv6 addresses and an Ethernet MAC", vip, src, mac)
	}
	const msgLen = nsLen + 8
	group, groupMAC := solicitedNode(vip)
	b := make([]byte, ethHeaderLen+ipv6HeaderLen+msgLen)
	ethernet(b, groupMAC, mac, ethTypeIPv6)
	ip := b[ethHeaderLen:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:6], msgLen)
	ip[6], ip[7] = protoICMPv6, 255
	s, dst := src.As16(), group.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], dst[:])
	msg := ip[ipv6HeaderLen:]
	msg[0] = icmpv6NS
	target := vip.As16()
	copy(msg[8:24], target[:])
	msg[24], msg[25] = optSourceLL, 1 // one unit of 8 bytes
	copy(msg[26:32], mac)
	binary.BigEndian.PutUint16(msg[2:4], icmpv6Checksum(ip[8:24], ip[24:40], msg))
	return b, groupMAC, nil
}

// naAnnouncement is an unsolicited neighbour advertisement of vip by mac
// (RFC 4861 7.2.6), as keepalived sends one as it takes an IPv6 VIP: from
// vip to all nodes, hop limit 255, the override flag set (and the router
// flag when this node forwards, so that a host using it as a router keeps
// doing so) and mac in the target link-layer address option. Every host
// that has an entry for vip updates it to mac.
func naAnnouncement(mac net.HardwareAddr, vip netip.Addr, router bool) ([]byte, error) {
	if len(mac) != 6 || !vip.Is6() || vip.Is4In6() {
		return nil, fmt.Errorf("building the neighbour advertisement of %s from %s: needs an IPv6 address and an Ethernet MAC", vip, mac)
	}
	const msgLen = nsLen + 8
	b := make([]byte, ethHeaderLen+ipv6HeaderLen+msgLen)
	ethernet(b, allNodesMAC, mac, ethTypeIPv6)
	ip := b[ethHeaderLen:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:6], msgLen)
	ip[6], ip[7] = protoICMPv6, 255
	src, dst := vip.As16(), allNodes.As16()
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	msg := ip[ipv6HeaderLen:]
	msg[0] = icmpv6NA
	msg[4] = naOverride
	if router {
		msg[4] |= naRouter
	}
	copy(msg[8:24], src[:])
	msg[24], msg[25] = optTargetLL, 1 // one unit of 8 bytes
	copy(msg[26:32], mac)
	binary.BigEndian.PutUint16(msg[2:4], icmpv6Checksum(ip[8:24], ip[24:40], msg))
	return b, nil
}

// icmpv6Checksum is the RFC 4443 checksum of msg (its checksum field zero)
// sent from src to dst: the ones' complement of the ones' complement sum of
// the pseudo-header and the message.
func icmpv6Checksum(src, dst, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[0:4], uint32(len(msg)))
	pseudo[7] = protoICMPv6
	add(pseudo[:])
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// claim is one host saying that it has an address: the address and the
// host's link-layer address.
type claim struct {
	addr netip.Addr
	mac  net.HardwareAddr
}

// arpDecoder reads ARP frames.
type arpDecoder struct{}

func newARPDecoder() *arpDecoder { return &arpDecoder{} }

// claims returns what an ARP frame says about who has which address: the
// sender of a reply, of a gratuitous request or announcement (sender and
// target address the same) and of any request has its sender address; the
// sender of a probe (sender address 0.0.0.0) is about to take its target
// address, or holds it and checks, as this program does. A frame that is
// not Ethernet/IPv4 ARP, or has no usable sender, gives nothing.
func (*arpDecoder) claims(frame []byte) []claim {
	if len(frame) < ethHeaderLen+arpLen || binary.BigEndian.Uint16(frame[12:14]) != ethTypeARP {
		return nil
	}
	a := frame[ethHeaderLen:]
	if binary.BigEndian.Uint16(a[0:2]) != 1 || binary.BigEndian.Uint16(a[2:4]) != ethTypeIPv4 || a[4] != 6 || a[5] != 4 {
		return nil
	}
	op := binary.BigEndian.Uint16(a[6:8])
	mac := net.HardwareAddr(bytes.Clone(a[8:14]))
	sender := netip.AddrFrom4([4]byte(a[14:18]))
	target := netip.AddrFrom4([4]byte(a[24:28]))
	switch {
	case sender.IsUnspecified() && op == arpRequest:
		return []claim{{target, mac}}
	case !sender.IsUnspecified() && (op == arpRequest || op == arpReply):
		return []claim{{sender, mac}}
	}
	return nil
}

// ndpDecoder reads ICMPv6 messages as a raw ICMPv6 socket delivers them
// (without the IPv6 header).
type ndpDecoder struct{}

func newNDPDecoder() *ndpDecoder { return &ndpDecoder{} }

// claims returns the claim of a neighbour advertisement: its target
// address, with the target link-layer address option (every advertisement
// Linux and keepalived send to all nodes has one). Other messages give
// nothing.
func (*ndpDecoder) claims(msg []byte) []claim {
	if len(msg) < nsLen || msg[0] != icmpv6NA || msg[1] != 0 {
		return nil
	}
	target := netip.AddrFrom16([16]byte(msg[8:24]))
	// Options: type, length in units of 8 bytes (the type and length
	// included), data. A message whose options do not parse to the end is
	// malformed (RFC 4861 7.1.2) and says nothing.
	var mac net.HardwareAddr
	opts := msg[nsLen:]
	for len(opts) > 0 {
		if len(opts) < 2 {
			return nil
		}
		n := int(opts[1]) * 8
		if n == 0 || n > len(opts) {
			return nil
		}
		if opts[0] == optTargetLL && n == 8 && mac == nil {
			mac = net.HardwareAddr(bytes.Clone(opts[2:8]))
		}
		opts = opts[n:]
	}
	if mac == nil {
		return nil
	}
	return []claim{{target, mac}}
}

// claimsFrom is claims for a message that came from src, as a raw ICMPv6
// socket reads it: a duplicate address detection probe (a solicitation from
// the unspecified address) is another host about to take its target, or
// holding it and checking, as this program does; it carries no link-layer
// address, so its claim has none.
func (d *ndpDecoder) claimsFrom(msg []byte, src net.Addr) []claim {
	if len(msg) >= nsLen && msg[0] == icmpv6NS && msg[1] == 0 {
		if a, ok := src.(*net.IPAddr); ok && a.IP.IsUnspecified() {
			return []claim{{addr: netip.AddrFrom16([16]byte(msg[8:24]))}}
		}
		return nil
	}
	return d.claims(msg)
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
	// interval is the advert interval the advert carries: whole seconds
	// in VRRPv2, centiseconds in VRRPv3.
	interval time.Duration
	addrs    []netip.Addr
}

var errNotAdvert = errors.New("not a VRRP advertisement")

// parseAdvert decodes a VRRP message as a raw socket delivers it (the IPv4
// header stripped, or an IPv6 payload). v6 says which family the addresses
// are. Both versions start with version and type (advertisement, 1), the
// router id, the priority and the address count. VRRPv2 (RFC 3768, IPv4
// only) goes on with the authentication type, the interval in seconds and
// the checksum, then the addresses and 8 bytes of authentication data;
// VRRPv3 (RFC 5798) with 4 reserved bits and a 12-bit interval in
// centiseconds, the checksum, then the addresses.
func parseAdvert(b []byte, v6 bool) (advert, error) {
	if len(b) < 8 {
		return advert{}, fmt.Errorf("%w: %d bytes", errNotAdvert, len(b))
	}
	version, typ, n := int(b[0]>>4), b[0]&0x0f, int(b[3])
	if version != 2 && version != 3 {
		return advert{}, fmt.Errorf("%w: version %d", errNotAdvert, version)
	}
	if typ != 1 {
		return advert{}, fmt.Errorf("%w: VRRPv%d type %d", errNotAdvert, version, typ)
	}
	a := advert{version: version, vrid: int(b[1]), priority: int(b[2])}
	size := 4
	if v6 {
		size = 16
	}
	if version == 2 {
		if v6 {
			return advert{}, fmt.Errorf("%w: VRRPv2 over IPv6", errNotAdvert)
		}
		if n == 0 {
			return advert{}, fmt.Errorf("%w: VRRPv2 without an address", errNotAdvert)
		}
		a.authType = int(b[4])
		a.interval = time.Duration(b[5]) * time.Second
	} else {
		a.interval = time.Duration(binary.BigEndian.Uint16(b[4:6])&0x0fff) * 10 * time.Millisecond
	}
	end := 8 + n*size
	if version == 2 {
		end += len(a.auth)
	}
	if len(b) < end {
		return advert{}, fmt.Errorf("%w: %d addresses do not fit in %d bytes", errNotAdvert, n, len(b))
	}
	for i := range n {
		addr, _ := netip.AddrFromSlice(b[8+i*size : 8+(i+1)*size])
		a.addrs = append(a.addrs, addr)
	}
	if version == 2 {
		copy(a.auth[:], b[8+n*size:])
	}
	return a, nil
}
