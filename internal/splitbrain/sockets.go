package splitbrain

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// conn is one socket of the guard: the read, write and close of
// net.PacketConn, which every real socket here implements.
type conn interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, addr net.Addr) (int, error)
	Close() error
}

// sockets are the guard's sockets on the interface; a nil one is not used.
// Every one of them needs CAP_NET_RAW.
type sockets struct {
	// arp is an AF_PACKET socket for ARP frames (ETH_P_ARP), filtered in
	// the kernel to replies, announcements and probes: ARP probes and
	// announcements out, claims on VIPs in.
	arp conn
	// nsOut is an AF_PACKET socket bound to no protocol: it only sends
	// the neighbour solicitations (probes with the unspecified source
	// address, which only a whole frame can carry) and advertisements, and
	// receives nothing.
	nsOut conn
	// naIn is a raw ICMPv6 socket filtered in the kernel to neighbour
	// advertisements and duplicate address detection probes: claims on
	// IPv6 VIPs in.
	naIn conn
	// vrrp4 and vrrp6 are raw IP sockets for protocol 112: every VRRP
	// advert this node's IP stack accepts on the interface, which is what
	// keepalived sees.
	vrrp4, vrrp6 conn
	// clock4 and clock6 are raw IP sockets for protocol 112 that keep
	// every advert for this deployment's router ids: the takeovers'
	// clock (advertClock). Open only when takeovers are told.
	clock4, clock6 conn
	// announce is an AF_PACKET socket that keeps this node's own
	// announcements going out (gratuitous ARPs, unsolicited neighbour
	// advertisements): when a takeover reached the clients. Open only
	// when takeovers are told.
	announce conn
}

func (s sockets) all() []conn {
	var out []conn
	for _, c := range []conn{s.arp, s.nsOut, s.naIn, s.vrrp4, s.vrrp6, s.clock4, s.clock6, s.announce} {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

func (s sockets) close() {
	for _, c := range s.all() {
		c.Close()
	}
}

// openSockets opens the sockets for the families of expect's router ids on
// ifi. Each one that fails is left nil and its error returned, naming what
// it was for, so that the rest still works.
func openSockets(ifi *net.Interface, expect map[key]expectation, takeovers bool) (sockets, []error) {
	var (
		s      sockets
		errs   []error
		err    error
		v4, v6 bool
	)
	for k := range expect {
		v4, v6 = v4 || !k.v6, v6 || k.v6
	}
	fail := func(what string, err error) {
		errs = append(errs, fmt.Errorf("%s on %s: %w (needs CAP_NET_RAW)", what, ifi.Name, err))
	}
	if v4 {
		if s.arp, err = listenPacket(ifi, unix.ETH_P_ARP, mustAssemble(arpProgram(nil))); err != nil {
			fail("ARP socket for duplicate IPv4 VIP detection", err)
		}
		if s.vrrp4, err = listenVRRP(ifi, expect, false); err != nil {
			fail("raw VRRP socket for foreign IPv4 speakers", err)
		}
	}
	if v6 {
		if s.nsOut, err = listenPacket(ifi, 0, nil); err != nil {
			fail("packet socket for duplicate IPv6 VIP detection", err)
		}
		if s.naIn, err = listenNA(ifi); err != nil {
			fail("ICMPv6 socket for duplicate IPv6 VIP detection", err)
		}
		if s.vrrp6, err = listenVRRP(ifi, expect, true); err != nil {
			fail("raw VRRP socket for foreign IPv6 speakers", err)
		}
	}
	if takeovers {
		if v4 {
			if s.clock4, err = listenClock(ifi, expect, false); err != nil {
				fail("raw VRRP socket for the takeovers' clock", err)
			}
		}
		if v6 {
			if s.clock6, err = listenClock(ifi, expect, true); err != nil {
				fail("raw VRRPv6 socket for the takeovers' clock", err)
			}
		}
		if s.announce, err = listenPacket(ifi, unix.ETH_P_ALL, mustAssemble(announceProgram)); err != nil {
			fail("packet socket for this node's announcements", err)
		}
	}
	return s, errs
}

// listenClock opens a raw VRRP socket on ifi that keeps the adverts for
// expect's router ids of one family (clockProgram).
func listenClock(ifi *net.Interface, expect map[key]expectation, v6 bool) (conn, error) {
	network, address := "ip4:112", "0.0.0.0"
	if v6 {
		network, address = "ip6:112", "::"
	}
	c, err := listenIP(ifi, network, address)
	if err != nil {
		return nil, err
	}
	if err := setClockFilter(c, expect, v6); err != nil {
		c.Close()
		return nil, err
	}
	if err := stampArrivals(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// stampArrivals asks the kernel to pass each packet's arrival time with it
// (SO_TIMESTAMPNS): a reader that runs late still times the advert when it
// came (readClock).
func stampArrivals(c net.PacketConn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("asking for arrival times (SO_TIMESTAMPNS): %w", serr)
	}
	return nil
}

// stampedReader is a socket that reads a packet with its control messages
// (a raw IP socket).
type stampedReader interface {
	ReadMsgIP(b, oob []byte) (n, oobn, flags int, addr *net.IPAddr, err error)
}

// maxArrivalAge is the oldest arrival time believed: an older one (a wall
// clock stepped back meanwhile) is replaced by the time it was read.
const maxArrivalAge = 10 * time.Second

// arrival is when a packet read at now arrived, from its control messages
// (SCM_TIMESTAMPNS): now less its age, so that the time keeps now's
// monotonic reading. Without a well-formed stamp, or with one in the
// future or older than maxArrivalAge, it is now.
func arrival(oob []byte, now time.Time) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return now
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS || len(m.Data) < 16 {
			continue
		}
		sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
		nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
		if nsec < 0 || nsec >= 1e9 {
			return now
		}
		age := now.Round(0).Sub(time.Unix(sec, nsec))
		if age < 0 || age > maxArrivalAge {
			return now
		}
		return now.Add(-age)
	}
	return now
}

// setClockFilter attaches clockProgram to a clock socket.
func setClockFilter(c net.PacketConn, expect map[key]expectation, v6 bool) error {
	raw, err := bpf.Assemble(clockProgram(expect, v6))
	if err == nil {
		if v6 {
			err = ipv6.NewPacketConn(c).SetBPF(raw)
		} else {
			err = ipv4.NewPacketConn(c).SetBPF(raw)
		}
	}
	if err != nil {
		return errors.Join(errors.New("attaching the clock's filter"), err)
	}
	return nil
}

// clockProgram keeps the adverts for one of expect's router ids of one
// family, whoever sends them: a member's, the rare foreign one, this
// node's own (the reader skips them). The filter of a raw IPv4 socket
// sees the IP header first.
func clockProgram(expect map[key]expectation, v6 bool) []bpf.Instruction {
	a := newAsm()
	if v6 {
		a.add(bpf.LoadAbsolute{Off: 1, Size: 1})
	} else {
		a.add(bpf.LoadMemShift{Off: 0}, bpf.LoadIndirect{Off: 1, Size: 1})
	}
	for _, k := range familyKeys(expect, v6) {
		a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(k.vrid), SkipTrue: 1})
		a.jump("accept")
	}
	a.add(bpf.RetConstant{Val: 0})
	a.label("accept")
	a.add(bpf.RetConstant{Val: acceptLen})
	return a.done()
}

// packetOutgoing is the kernel's packet type of a frame this host sends
// (PACKET_OUTGOING).
const packetOutgoing = 4

// announceProgram keeps the frames this host sends that announce an
// address: ARP with the sender address as the target (a gratuitous ARP)
// and ICMPv6 neighbour advertisements (without IPv6 extension headers, as
// keepalived sends them).
var announceProgram = func() []bpf.Instruction {
	a := newAsm()
	a.add(bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: packetOutgoing, SkipTrue: 1})
	a.jump("drop")
	a.add(bpf.LoadAbsolute{Off: 12, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ethTypeARP, SkipTrue: 1})
	a.jump("arp")
	a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ethTypeIPv6, SkipTrue: 1})
	a.jump("ipv6")
	a.jump("drop")
	a.label("arp")
	a.add(bpf.LoadAbsolute{Off: 14 + 24, Size: 4}, bpf.TAX{}, bpf.LoadAbsolute{Off: 14 + 14, Size: 4},
		bpf.JumpIfX{Cond: bpf.JumpNotEqual, SkipTrue: 1})
	a.jump("accept")
	a.jump("drop")
	a.label("ipv6")
	a.add(bpf.LoadAbsolute{Off: 14 + 6, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 58, SkipTrue: 3},
		bpf.LoadAbsolute{Off: 14 + 40, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: icmpv6NA, SkipTrue: 1})
	a.jump("accept")
	a.label("drop")
	a.add(bpf.RetConstant{Val: 0})
	a.label("accept")
	a.add(bpf.RetConstant{Val: acceptLen})
	return a.done()
}()

// announcedAddr is the address a frame announceProgram kept announces.
func announcedAddr(frame []byte) (netip.Addr, bool) {
	switch {
	case len(frame) >= ethHeaderLen+arpLen && binary.BigEndian.Uint16(frame[12:14]) == ethTypeARP:
		return netip.AddrFrom4([4]byte(frame[14+14 : 14+18])), true
	case len(frame) >= 14+40+8+16 && binary.BigEndian.Uint16(frame[12:14]) == ethTypeIPv6 && frame[14+6] == 58 && frame[14+40] == icmpv6NA:
		return netip.AddrFrom16([16]byte(frame[14+40+8 : 14+40+8+16])), true
	}
	return netip.Addr{}, false
}

// listenPacket opens an AF_PACKET socket on ifi for protocol (0: none,
// send only), with filter applied before it binds, so that no frame slips
// past the filter.
func listenPacket(ifi *net.Interface, protocol int, filter []bpf.RawInstruction) (conn, error) {
	c, err := packet.Listen(ifi, packet.Raw, protocol, &packet.Config{Filter: filter})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// arpProgram passes the ARP frames that claim one of vips, the
// deployment's IPv4 VIPs, for their sender: replies (to this node's
// probes, among others), announcements (sender address = target address:
// the gratuitous ARP keepalived sends as it takes a VIP) and probes (sender
// address 0.0.0.0: another host about to take one, or holding it and
// checking, or a guard that has just removed it as a stray). Ordinary
// requests, the bulk of ARP on a busy network, and every claim on another
// address never leave the kernel. Claims on VIPs this node does not hold
// are read too: one read just before this node's listing shows a VIP it
// took is what another backup that took it at the same moment says (see
// contests). In a conflict, each holder's probe draws the other's reply.
func arpProgram(vips []netip.Addr) []bpf.Instruction {
	a := newAsm()
	// The operation, after the Ethernet header and 6 bytes of ARP.
	a.add(bpf.LoadAbsolute{Off: 14 + 6, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: arpReply, SkipTrue: 1})
	a.jump("sender")
	// A request: the sender's protocol address against the target's (an
	// announcement claims the sender's), and against 0.0.0.0 (a probe
	// claims the target's).
	a.add(bpf.LoadAbsolute{Off: 14 + 24, Size: 4}, bpf.TAX{}, bpf.LoadAbsolute{Off: 14 + 14, Size: 4},
		bpf.JumpIfX{Cond: bpf.JumpNotEqual, SkipTrue: 1})
	a.jump("vip")
	a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1})
	a.jump("drop")
	a.add(bpf.TXA{})
	a.jump("vip")
	a.label("sender")
	a.add(bpf.LoadAbsolute{Off: 14 + 14, Size: 4})
	a.label("vip")
	for _, v := range vips {
		if !v.Is4() {
			continue
		}
		a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(v.AsSlice()), SkipTrue: 1})
		a.jump("accept")
	}
	a.label("drop")
	a.add(bpf.RetConstant{Val: 0})
	a.label("accept")
	a.add(bpf.RetConstant{Val: acceptLen})
	return a.done()
}

// ndpProgram passes, of the ICMPv6 messages that ICMP6_FILTER lets
// through (advertisements and solicitations), the advertisements and the
// solicitations without options: a duplicate address detection probe has
// none (RFC 4862 5.4.2), an ordinary solicitation carries the sender's
// link-layer address (every client resolving a VIP sends one). A raw IPv6
// socket's filter sees the message without the IPv6 header.
var ndpProgram = []bpf.Instruction{
	bpf.LoadAbsolute{Off: 0, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: icmpv6NA, SkipTrue: 3},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: icmpv6NS, SkipTrue: 3},
	bpf.LoadExtension{Num: bpf.ExtLen},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: nsLen, SkipFalse: 1},
	bpf.RetConstant{Val: 0xffff},
	bpf.RetConstant{Val: 0},
}

var ndpFilter = mustAssemble(ndpProgram)

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(err)
	}
	return raw
}

// filterable is a socket whose kernel filter can be replaced.
type filterable interface {
	SetBPF(filter []bpf.RawInstruction) error
}

// listenIP opens a raw IP socket bound to ifi, so it only sees what arrives
// there.
func listenIP(ifi *net.Interface, network, address string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifi.Name)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.ListenPacket(context.Background(), network, address)
}

// listenVRRP opens a raw VRRP socket on ifi with the kernel filter that
// drops this deployment's own adverts (advertFilter). The heartbeats are
// sent on it too.
func listenVRRP(ifi *net.Interface, expect map[key]expectation, v6 bool) (conn, error) {
	network, address := "ip4:112", "0.0.0.0"
	if v6 {
		network, address = "ip6:112", "::"
	}
	c, err := listenIP(ifi, network, address)
	if err != nil {
		return nil, err
	}
	if err := setAdvertFilter(c, expect, v6); err != nil {
		c.Close()
		return nil, err
	}
	// The heartbeats go out on it, with VRRP's hop limit.
	if v6 {
		err = ipv6.NewPacketConn(c).SetHopLimit(255)
	} else {
		err = ipv4.NewPacketConn(c).SetTTL(255)
	}
	if err != nil {
		c.Close()
		return nil, errors.Join(errors.New("setting the heartbeats' hop limit"), err)
	}
	return c, nil
}

// setAdvertFilter attaches expect's advert filter to a VRRP socket, or,
// when that program would be too long, one that keeps every advert. A
// filter attached later replaces the earlier one at once.
func setAdvertFilter(c net.PacketConn, expect map[key]expectation, v6 bool) error {
	prog := advertFilter(expect, v6)
	if prog == nil {
		prog = []bpf.Instruction{bpf.RetConstant{Val: acceptLen}}
	}
	raw, err := bpf.Assemble(prog)
	if err == nil {
		if v6 {
			err = ipv6.NewPacketConn(c).SetBPF(raw)
		} else {
			err = ipv4.NewPacketConn(c).SetBPF(raw)
		}
	}
	if err != nil {
		return errors.Join(errors.New("attaching the advert filter"), err)
	}
	return nil
}

// listenNA opens a raw ICMPv6 socket on ifi that the kernel lets only
// neighbour advertisements and duplicate address detection probes
// through.
func listenNA(ifi *net.Interface) (conn, error) {
	c, err := listenIP(ifi, "ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, err
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeNeighborAdvertisement)
	f.Accept(ipv6.ICMPTypeNeighborSolicitation)
	pc := ipv6.NewPacketConn(c)
	if err := pc.SetICMPFilter(&f); err != nil {
		c.Close()
		return nil, errors.Join(errors.New("setting ICMP6_FILTER"), err)
	}
	if err := pc.SetBPF(ndpFilter); err != nil {
		c.Close()
		return nil, errors.Join(errors.New("attaching the solicitation filter"), err)
	}
	return c, nil
}

// sendFrom writes b to dst on c from src: a raw IP socket sends with src as
// its source (the address the peers list), another conn as it is.
func sendFrom(c conn, b []byte, src, dst netip.Addr) error {
	to := &net.IPAddr{IP: dst.AsSlice()}
	pc, ok := c.(*net.IPConn)
	switch {
	case !ok || !src.IsValid():
		_, err := c.WriteTo(b, to)
		return err
	case dst.Is4():
		_, err := ipv4.NewPacketConn(pc).WriteTo(b, &ipv4.ControlMessage{Src: src.AsSlice()}, to)
		return err
	}
	_, err := ipv6.NewPacketConn(pc).WriteTo(b, &ipv6.ControlMessage{Src: src.AsSlice()}, to)
	return err
}
