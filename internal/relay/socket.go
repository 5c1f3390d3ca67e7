package relay

import (
	"context"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// dropAll is a socket filter that keeps nothing: the relay's raw sockets
// only send, and would otherwise queue every VRRP packet that arrives.
var dropAll = func() []bpf.RawInstruction {
	raw, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		panic(err)
	}
	return raw
}()

// rawSender is a raw IP socket for protocol 112 on one interface.
type rawSender struct{ conn net.PacketConn }

// openSender opens a raw VRRP socket bound to iface that sends to the
// multicast group, and for IPv4 to single nodes, with a TTL (hop limit) of
// 255, as VRRP requires: from src for IPv4, from the interface's
// link-local address for IPv6 (the kernel computes the IPv6 checksum).
func openSender(iface string, src netip.Addr, v6 bool) (sender, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, iface)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	network, address := "ip4:112", src.String()
	if v6 {
		network, address = "ip6:112", "::"
	}
	conn, err := lc.ListenPacket(context.Background(), network, address)
	if err != nil {
		return nil, err
	}
	s := &rawSender{conn: conn}
	if v6 {
		p := ipv6.NewPacketConn(conn)
		err = firstErr(p.SetBPF(dropAll), p.SetMulticastInterface(ifi), p.SetMulticastHopLimit(255),
			p.SetMulticastLoopback(false), p.SetChecksum(true, 6))
	} else {
		p := ipv4.NewPacketConn(conn)
		err = firstErr(p.SetBPF(dropAll), p.SetMulticastInterface(ifi), p.SetMulticastTTL(255),
			p.SetTTL(255), p.SetMulticastLoopback(false))
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func (s *rawSender) send(b []byte, to netip.Addr) error {
	_, err := s.conn.WriteTo(b, &net.IPAddr{IP: to.AsSlice()})
	return err
}

func (s *rawSender) close() { s.conn.Close() }

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
