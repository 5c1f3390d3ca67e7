package check

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestTCP: a listening port passes; a closed one and a listener whose
// queue is full (its SYNs dropped: a hung service) fail, the latter at the
// probe's timeout.
func TestTCP(t *testing.T) {
	probe := func(addr netip.AddrPort) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(t.Context(), Timeout)
		defer cancel()
		began := time.Now()
		err := NewTCP(addr).Probe(ctx)
		return time.Since(began), err
	}

	t.Run("listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if _, err := probe(netip.MustParseAddrPort(ln.Addr().String())); err != nil {
			t.Errorf("probe of a listening port: %v", err)
		}
	})

	t.Run("closed listener", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := netip.MustParseAddrPort(ln.Addr().String())
		ln.Close()
		if _, err := probe(addr); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("probe of a closed port: %v, want connection refused", err)
		}
	})

	t.Run("hung", func(t *testing.T) {
		addr := fullListener(t)
		took, err := probe(addr)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("probe of a full listener: %v, want a timeout", err)
		}
		if took < Timeout {
			t.Errorf("gave up after %s, before the timeout %s", took, Timeout)
		}
	})

	t.Run("retarget", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		p := NewTCP(netip.MustParseAddrPort("127.0.0.1:1"))
		p.Retarget(netip.MustParseAddrPort(ln.Addr().String()))
		if err := p.Probe(t.Context()); err != nil {
			t.Errorf("probe after Retarget: %v", err)
		}
		if p.String() != ln.Addr().String() {
			t.Errorf("String() = %s, want %s", p, ln.Addr())
		}
	})
}

// fullListener listens on a loopback port with the shortest accept queue
// and fills it: the kernel drops the SYNs of further connects, as it does
// for a service too busy to accept.
func fullListener(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	conn, err := net.DialTimeout("tcp", addr.String(), time.Second) // fills the queue
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return addr
}
