package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// resubscribeDelay is the pause before a notification socket that failed is
// opened again.
const resubscribeDelay = time.Second

// notifyBuffer is the receive buffer asked for the notification socket: room
// for a burst of changes (keepalived adding 254 VIPs) while the reader is
// descheduled. A queue that overflows anyway costs a listing, not a change.
const notifyBuffer = 1 << 20

// WatchStats counts what the address watches of a Netlink went through.
type WatchStats struct {
	// Overflows counts the times the kernel dropped notifications because
	// a watch's queue was full (the reader fell behind a storm of
	// changes); each is followed by a value, so the reader lists again.
	Overflows uint64
	// Reopens counts notification sockets that failed and were opened
	// again.
	Reopens uint64
}

// WatchAddrs sends a value on changed when the addresses on iface change
// (every interface when iface is empty), from the kernel's address
// notifications (no polling), until ctx ends; it returns nil then. The sends
// never block: make changed buffered (one slot is enough), and values
// coalesce, so a burst of changes wakes the reader once or twice, and the
// reader lists the addresses again. A value is also sent once the watch is
// subscribed, and whenever notifications may have been lost: the kernel's
// queue for the watch overflowed (the watch goes on), or the socket failed
// and was opened again (after resubscribeDelay). It returns an error only
// when iface does not exist. Subscribing needs no capability.
func (n *Netlink) WatchAddrs(ctx context.Context, iface string, changed chan<- struct{}) error {
	index := anyLink
	if iface != "" {
		link, err := n.link(iface)
		if err != nil {
			return err
		}
		index = link.Attrs().Index
	}
	w := addrWatch{
		open:   func() (addrSource, error) { return openAddrSocket(n.ns, notifyBuffer) },
		delay:  resubscribeDelay,
		index:  index,
		counts: &n.watchCounts,
	}
	w.run(ctx, changed)
	return nil
}

// WatchStats returns what the address watches went through so far.
func (n *Netlink) WatchStats() WatchStats {
	return WatchStats{Overflows: n.watchCounts.overflows.Load(), Reopens: n.watchCounts.reopens.Load()}
}

type watchCounts struct {
	overflows, reopens atomic.Uint64
}

// anyLink is the index that matches every interface.
const anyLink = -1

// errOverflow is an addrSource's word that the kernel dropped notifications
// for it; the source still works.
var errOverflow = errors.New("address notifications lost: the socket's queue overflowed")

// addrSource is a subscription to the kernel's address notifications.
type addrSource interface {
	// read blocks until notifications arrive and returns the indexes of
	// the links they are about. resync is set when the messages could not
	// all be read (the reader must list again). It returns errOverflow
	// when notifications were dropped, another error when the source no
	// longer works, or after close.
	read() (links []int, resync bool, err error)
	// close ends the subscription and any read in progress; it may be
	// called more than once, from any goroutine.
	close()
}

// addrWatch follows one addrSource at a time, opening a new one when one
// fails.
type addrWatch struct {
	open   func() (addrSource, error)
	delay  time.Duration
	index  int
	counts *watchCounts
}

func (w addrWatch) run(ctx context.Context, changed chan<- struct{}) {
	for ctx.Err() == nil {
		if src, err := w.open(); err == nil {
			stop := context.AfterFunc(ctx, src.close)
			// Subscribed: anything may have changed before.
			notify(changed)
			w.follow(src, changed)
			stop()
			src.close()
		}
		if ctx.Err() != nil {
			return
		}
		w.counts.reopens.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.delay):
		}
	}
}

// follow passes src's notifications on until it fails.
func (w addrWatch) follow(src addrSource, changed chan<- struct{}) {
	for {
		links, resync, err := src.read()
		switch {
		case errors.Is(err, errOverflow):
			w.counts.overflows.Add(1)
			notify(changed)
			continue
		case err != nil:
			return
		}
		if resync {
			notify(changed)
			continue
		}
		for _, l := range links {
			if w.index == anyLink || l == w.index {
				notify(changed)
				break
			}
		}
	}
}

func notify(out chan<- struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

// addrSocket is a netlink socket subscribed to the IPv4 and IPv6 address
// groups, read through the runtime's poller so that close ends a read.
type addrSocket struct {
	f    *os.File
	rc   syscall.RawConn
	buf  []byte
	once sync.Once
}

// openAddrSocket opens the socket in the network namespace ns (a closed
// handle: the current one) with a receive buffer of rcvbuf bytes.
func openAddrSocket(ns netns.NsHandle, rcvbuf int) (*addrSocket, error) {
	fd, err := socketIn(ns, unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket for address changes: %w", err)
	}
	if rcvbuf > 0 {
		// Without CAP_NET_ADMIN the kernel caps it at net.core.rmem_max:
		// a smaller queue, no failure.
		_ = setRcvbuf(fd, rcvbuf)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribing to address changes: %w", err)
	}
	f := os.NewFile(uintptr(fd), "netlink-addr")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &addrSocket{f: f, rc: rc, buf: make([]byte, 1<<16)}, nil
}

func (s *addrSocket) read() ([]int, bool, error) {
	var (
		n    int
		from unix.Sockaddr
		rerr error
	)
	err := s.rc.Read(func(fd uintptr) bool {
		n, from, rerr = unix.Recvfrom(int(fd), s.buf, unix.MSG_DONTWAIT)
		return !errors.Is(rerr, unix.EAGAIN) && !errors.Is(rerr, unix.EINTR)
	})
	switch {
	case err != nil:
		return nil, false, err
	case errors.Is(rerr, unix.ENOBUFS):
		return nil, false, errOverflow
	case rerr != nil:
		return nil, false, fmt.Errorf("reading address changes: %w", rerr)
	}
	// Only the kernel speaks for the groups; anything else is ignored.
	if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
		return nil, false, nil
	}
	links, ok := parseAddrMessages(s.buf[:n])
	return links, !ok, nil
}

func (s *addrSocket) close() { s.once.Do(func() { s.f.Close() }) }

// parseAddrMessages returns the link indexes of the address messages in b,
// a datagram of netlink messages. ok is false when b holds something a
// reader cannot trust to be complete: a malformed or truncated message, an
// error or an overrun report. It never panics on any input.
func parseAddrMessages(b []byte) (links []int, ok bool) {
	const (
		headerLen  = unix.SizeofNlMsghdr
		ifaddrLen  = unix.SizeofIfAddrmsg
		indexStart = 4 // ifa_family, ifa_prefixlen, ifa_flags, ifa_scope, then ifa_index
	)
	ok = true
	for len(b) >= headerLen {
		length := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if length < headerLen || length > len(b) {
			return links, false
		}
		data := b[headerLen:length]
		switch typ {
		case unix.RTM_NEWADDR, unix.RTM_DELADDR:
			if len(data) < ifaddrLen {
				ok = false
				break
			}
			links = append(links, int(binary.NativeEndian.Uint32(data[indexStart:indexStart+4])))
		case unix.NLMSG_ERROR, unix.NLMSG_OVERRUN:
			ok = false
		}
		aligned := (length + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if aligned >= len(b) {
			break
		}
		b = b[aligned:]
	}
	return links, ok
}

// socketIn opens a socket in the network namespace ns (a closed handle: the
// current one). The thread that opens it enters ns and comes back; should
// it fail to come back, it stays locked, and the runtime ends it with the
// goroutine instead of reusing it in the wrong namespace.
func socketIn(ns netns.NsHandle, domain, typ, proto int) (int, error) {
	if !ns.IsOpen() {
		return unix.Socket(domain, typ, proto)
	}
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	// A goroutine of its own, so that a thread stranded in ns is never
	// the caller's.
	go func() {
		runtime.LockOSThread()
		cur, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("reading this thread's network namespace: %w", err)}
			return
		}
		defer cur.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("entering %s: %w", ns, err)}
			return
		}
		fd, serr := unix.Socket(domain, typ, proto)
		if err := netns.Set(cur); err != nil {
			// Locked to the end: the runtime drops the thread.
			if serr == nil {
				unix.Close(fd)
			}
			done <- result{-1, fmt.Errorf("leaving %s: %w", ns, err)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{fd, serr}
	}()
	r := <-done
	return r.fd, r.err
}

// setRcvbuf sets a socket's receive buffer, forced past net.core.rmem_max
// where the process may.
func setRcvbuf(fd, n int) error {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
}
