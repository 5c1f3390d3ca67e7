package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Priority is what the relayed adverts claim: 255, above every priority a
// multicast node can have (the shipped image gives up to 255 - slot, 255
// for a node whose last octet is 0 or 128; keepalived lowers its own 255
// to 254 when it hears another 255, so the relay wins that tie too).
const Priority = 255

// advert is one VRRP advertisement as this relay sends it for an instance.
type advert struct {
	version  int // 2 (RFC 3768, IPv4 only) or 3 (RFC 5798)
	vrid     uint8
	priority uint8
	interval time.Duration
	vips     []netip.Addr // in keepalived's order: that of virtual_ipaddress
	auth     [8]byte      // VRRPv2 PASS: the first 8 bytes of the password
}

// marshal writes the advert. src and dst are the IPv4 addresses of the
// packet, which VRRPv3's checksum covers; IPv6 leaves the checksum to the
// kernel (IPV6_CHECKSUM), since only it knows the link-local source.
func (a advert) marshal(src, dst netip.Addr) ([]byte, error) {
	if len(a.vips) == 0 || len(a.vips) > 255 {
		return nil, fmt.Errorf("VRRP advert for router id %d: %d VIPs", a.vrid, len(a.vips))
	}
	v6 := a.vips[0].Is6()
	size := 4
	if v6 {
		size = 16
	}
	n := 8 + len(a.vips)*size
	if a.version == 2 {
		n += len(a.auth)
	}
	b := make([]byte, n)
	b[0] = byte(a.version)<<4 | 1 // type 1: advertisement
	b[1], b[2], b[3] = a.vrid, a.priority, byte(len(a.vips))
	switch a.version {
	case 2:
		if v6 {
			return nil, errors.New("VRRPv2 carries IPv4 only")
		}
		secs := a.interval / time.Second
		if a.interval%time.Second != 0 || secs < 1 || secs > 255 {
			return nil, fmt.Errorf("VRRPv2 advert interval %s: whole seconds 1..255 only", a.interval)
		}
		b[4], b[5] = 1, byte(secs) // authentication type 1: PASS
		copy(b[8+len(a.vips)*size:], a.auth[:])
	case 3:
		cs := a.interval / (10 * time.Millisecond)
		if cs < 1 || cs > 0xfff {
			return nil, fmt.Errorf("VRRPv3 advert interval %s: 0.01..40.95 s", a.interval)
		}
		binary.BigEndian.PutUint16(b[4:6], uint16(cs))
	default:
		return nil, fmt.Errorf("VRRP version %d", a.version)
	}
	for i, v := range a.vips {
		if v.Is6() != v6 {
			return nil, errors.New("VRRP advert mixes IPv4 and IPv6 VIPs")
		}
		copy(b[8+i*size:], v.AsSlice())
	}
	switch {
	case a.version == 2:
		binary.BigEndian.PutUint16(b[6:8], checksum(b, 0))
	case !v6:
		// RFC 5798 5.2.8: over the IPv4 pseudo-header as well.
		s4, d4 := src.As4(), dst.As4()
		var sum uint32
		for _, w := range [][]byte{s4[:2], s4[2:], d4[:2], d4[2:]} {
			sum += uint32(binary.BigEndian.Uint16(w))
		}
		sum += 112 + uint32(len(b)) // protocol, length
		binary.BigEndian.PutUint16(b[6:8], checksum(b, sum))
	}
	return b, nil
}

// checksum is the Internet checksum of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
