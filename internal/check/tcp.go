package check

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
)

// TCP probes a service by connecting to it and closing the connection at
// once, as the shipped image's `bash -c '</dev/tcp/ADDR/PORT'` did: the
// kernel completes the handshake for a listening socket, so a probe fails
// only when nothing listens (refused), the listener's queue is full or its
// packets are dropped (timeout).
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

// Probe connects and closes.
func (t *TCP) Probe(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", t.String())
	if err != nil {
		return err
	}
	return conn.Close()
}

// String is the address probed.
func (t *TCP) String() string { return t.addr.Load().String() }
