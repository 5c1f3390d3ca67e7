package check

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
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
		return probeWith(ctx, NewTCP(addr))
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

	t.Run("listening, IPv6", func(t *testing.T) {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		defer ln.Close()
		if _, err := probe(netip.MustParseAddrPort(ln.Addr().String())); err != nil {
			t.Errorf("probe of a listening port: %v", err)
		}
	})

	t.Run("local connects end within Probe", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := netip.MustParseAddrPort(ln.Addr().String())
		p := NewTCP(addr)
		for range 20 {
			if wait, err := p.Probe(); wait != nil || err != nil {
				t.Fatalf("Probe of a listening port = %v, %v: want done, without error", wait != nil, err)
			}
		}
		ln.Close()
		if wait, err := p.Probe(); wait != nil || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Probe of a closed port = %v, %v: want done, refused", wait != nil, err)
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
		if !errors.Is(err, os.ErrDeadlineExceeded) {
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
		if _, err := probeWith(t.Context(), p); err != nil {
			t.Errorf("probe after Retarget: %v", err)
		}
		if p.String() != ln.Addr().String() {
			t.Errorf("String() = %s, want %s", p, ln.Addr())
		}
	})
}

// TestTCPWaitEndsWithItsContext: a pending probe returns when its context
// is cancelled, not only at its deadline.
func TestTCPWaitEndsWithItsContext(t *testing.T) {
	wait, err := NewTCP(fullListener(t)).Probe()
	if wait == nil {
		t.Fatalf("Probe of a full listener ended at once: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(30*time.Millisecond, cancel)
	began := time.Now()
	if err := wait(ctx); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("wait = %v, want a timeout", err)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("wait returned %s after its context was cancelled", took)
	}
}

// probeWith runs one probe of p to its end.
func probeWith(ctx context.Context, p *TCP) (time.Duration, error) {
	began := time.Now()
	wait, err := p.Probe()
	if wait != nil {
		err = wait(ctx)
	}
	return time.Since(began), err
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
