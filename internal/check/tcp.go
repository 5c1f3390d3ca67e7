package check

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// TCP probes a service by connecting to it and closing the connection at
// once, as the shipped image's `bash -c '</dev/tcp/ADDR/PORT'` did: the
// kernel completes the handshake for a listening socket, so a probe fails
// only when nothing listens (refused), or the listener's queue is full or
// its packets are dropped (timeout).
//
// It connects with plain system calls rather than net.Dialer: to a local
// address the handshake, or the refusal, is over before connect(2)
// returns, so most probes end within Probe, without a goroutine or the
// runtime's network poller. On a 2-core VM that halves what a probe costs
// (1.1 ms of CPU a period with net.Dialer in a goroutine, 0.5 ms inline).
type TCP struct {
	addr atomic.Pointer[netip.AddrPort]
}

// NewTCP probes addr.
func NewTCP(addr netip.AddrPort) *TCP {
	t := &TCP{}
	t.Retarget(addr)
	return t
}

// Retarget makes the next probes connect to addr: a reload found another
// node address.
func (t *TCP) Retarget(addr netip.AddrPort) { t.addr.Store(&addr) }

// String is the address probed.
func (t *TCP) String() string { return t.addr.Load().String() }

// Probe starts a connect. It ends within the call unless the handshake is
// still under way (a dropped SYN); then wait polls for its end.
func (t *TCP) Probe() (wait func(ctx context.Context) error, err error) {
	addr := *t.addr.Load()
	var sa unix.Sockaddr
	family := unix.AF_INET
	if addr.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("connect %s: socket: %w", addr, err)
	}
	err = unix.Connect(fd, sa)
	if err == unix.EINPROGRESS {
		var done bool
		done, err = connected(fd, 0)
		if !done {
			return func(ctx context.Context) error { return finish(ctx, fd, addr) }, nil
		}
	}
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	return nil, nil
}

// finish waits until fd's connect ends or ctx does, and closes fd.
func finish(ctx context.Context, fd int, addr netip.AddrPort) error {
	defer unix.Close(fd)
	for {
		// Poll in short slices, so that a cancelled ctx is noticed.
		slice := 10 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			slice = min(slice, time.Until(dl))
		}
		if ctx.Err() != nil || slice <= 0 {
			return fmt.Errorf("connect %s: %w", addr, os.ErrDeadlineExceeded)
		}
		done, err := connected(fd, slice)
		if done {
			if err != nil {
				return fmt.Errorf("connect %s: %w", addr, err)
			}
			return nil
		}
	}
}

// connected polls fd for the end of its connect for up to d: done when it
// ended, err its failure.
func connected(fd int, d time.Duration) (done bool, err error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, int((d+time.Millisecond-1)/time.Millisecond))
	switch {
	case err == unix.EINTR:
		return false, nil
	case err != nil:
		return true, err
	case n == 0:
		return false, nil
	}
	soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return true, err
	}
	if soErr != 0 {
		return true, unix.Errno(soErr)
	}
	return true, nil
}
