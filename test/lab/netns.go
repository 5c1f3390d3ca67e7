package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread that sits in the named network namespace, so
// sockets fn creates belong to it; they stay there after InNetns returns.
// fn must not start goroutines or resolve names: only its own thread moves.
func InNetns(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", name, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("reading the current netns: %w", err)
	}
	defer origin.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering netns %s: %w", name, err)
	}
	fnErr := fn()
	if err := netns.Set(origin); err != nil {
		// The thread stays locked and dies with its goroutine: it must
		// not run anything else in the wrong namespace.
		return fmt.Errorf("returning from netns %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// socketMaker opens sockets in a network namespace, on a thread that moved
// there for good: a client that opens hundreds of sockets a second needs no
// namespace switch per socket, and none of its waiting holds a thread (the
// sockets are used from any goroutine; a socket stays in the namespace it
// was made in).
type socketMaker struct {
	reqs chan socketReq
}

type socketReq struct {
	family int
	reply  chan socketResult
}

type socketResult struct {
	fd  int
	err error
}

func newSocketMaker(name string) (*socketMaker, error) {
	target, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("opening netns %s: %w", name, err)
	}
	m := &socketMaker{reqs: make(chan socketReq)}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine and never
		// runs anything else in the namespace.
		runtime.LockOSThread()
		err := netns.Set(target)
		target.Close()
		ready <- err
		if err != nil {
			return
		}
		for r := range m.reqs {
			fd, err := unix.Socket(r.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			r.reply <- socketResult{fd, err}
		}
	}()
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("entering netns %s: %w", name, err)
	}
	return m, nil
}

// lateGrace is how much longer than its limit a connect waits for the
// answer: time for a client running late on a busy machine to see an
// answer that came in time.
const lateGrace = time.Second

// connect connects a new TCP socket to to and closes it again. It fails
// unless the handshake took at most within by the kernel's clock: the
// round trip from the SYN leaving TCP to the SYN-ACK, which counts a SYN's
// wait for ARP, with no SYN sent twice. Timed by the kernel, a client whose
// goroutines or poller run late on a busy machine counts no answer that
// came in time as lost; the wait itself ends lateGrace after within.
func (m *socketMaker) connect(to netip.AddrPort, within time.Duration) error {
	f, info, err := m.open(to, time.Now().Add(within+lateGrace))
	if err != nil {
		return err
	}
	f.Close()
	if info.Total_retrans > 0 {
		return fmt.Errorf("connecting to %s: the SYN was sent %d more times", to, info.Total_retrans)
	}
	if rtt := time.Duration(info.Rtt) * time.Microsecond; rtt > within {
		return fmt.Errorf("connecting to %s: the handshake took %v, more than %v", to, rtt, within)
	}
	return nil
}

// dial connects a new TCP socket to to, or fails once deadline passes, and
// returns the connection.
func (m *socketMaker) dial(to netip.AddrPort, deadline time.Time) (net.Conn, error) {
	f, _, err := m.open(to, deadline)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// FileConn takes its own copy of the descriptor.
	return net.FileConn(f)
}

// open makes a socket in the namespace and connects it to to, waiting in
// the runtime's poller until it is connected, refused or deadline passes;
// it returns the connected socket and its TCP_INFO.
func (m *socketMaker) open(to netip.AddrPort, deadline time.Time) (*os.File, *unix.TCPInfo, error) {
	var (
		family = unix.AF_INET
		sa     unix.Sockaddr
	)
	if to.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(to.Port()), Addr: to.Addr().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
	}
	reply := make(chan socketResult, 1)
	m.reqs <- socketReq{family, reply}
	r := <-reply
	if r.err != nil {
		return nil, nil, r.err
	}
	if err := unix.Connect(r.fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(r.fd)
		return nil, nil, err
	}
	// A non-blocking descriptor: the file waits in the runtime's poller.
	f := os.NewFile(uintptr(r.fd), "tcp "+to.String())
	var (
		info    *unix.TCPInfo
		connErr error
	)
	err := f.SetWriteDeadline(deadline)
	if err == nil {
		var rc syscall.RawConn
		if rc, err = f.SyscallConn(); err == nil {
			err = rc.Write(func(fd uintptr) bool {
				if _, err := unix.Getpeername(int(fd)); err == nil {
					info, connErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
					return true // connected
				}
				switch v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR); {
				case err != nil:
					connErr = err
				case v != 0:
					connErr = unix.Errno(v)
				default:
					return false // still connecting: wait until writable
				}
				return true
			})
		}
	}
	if err == nil {
		err = connErr
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// ClientDialer is a dialer of TCP connections from the client namespace
// that switches no thread's namespace per connection: a client that opens
// hundreds a second, each waiting in the runtime's poller.
type ClientDialer struct {
	m *socketMaker
}

// ClientDialer returns a dialer from the client namespace; Close it.
func (c *Cluster) ClientDialer() (*ClientDialer, error) {
	m, err := newSocketMaker(c.Client.Netns)
	if err != nil {
		return nil, err
	}
	return &ClientDialer{m: m}, nil
}

// DialContext connects to address, an IP literal and a port, over TCP
// (network "tcp", "tcp4" or "tcp6"), until ctx's deadline (at most a
// minute).
func (d *ClientDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	to, err := netip.ParseAddrPort(address)
	if err != nil || !strings.HasPrefix(network, "tcp") {
		return nil, fmt.Errorf("lab: dial %s %q: want tcp and an IP literal with a port", network, address)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	return d.m.dial(to, deadline)
}

// Close ends the dialer's thread.
func (d *ClientDialer) Close() { d.m.close() }

// close ends the maker's thread.
func (m *socketMaker) close() { close(m.reqs) }
