package metrics

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// The listener's bounds. The metrics port is on the host network, open to
// whatever reaches the node's addresses; the kubelet's probes share it, so
// no bound may leave them waiting: /healthz and /readyz never wait for a
// scrape slot, and a new connection is never refused for want of room.
const (
	// maxScrapes is how many GET /metrics are served at once; more wait
	// for a slot up to scrapeWait, then get a 503. Legitimate scrapers
	// are few (Prometheus' replicas, a person with curl), and concurrent
	// scrapes share one rendering, so a slot is soon free: a scrape that
	// waits is answered within its scrape timeout, and the 503 that
	// Prometheus takes as a failed scrape (up 0) comes only when the
	// server cannot answer in time, not when other clients were first.
	// Waiting scrapes hold their connections, which maxConns bounds, and
	// a flood of them is slowed to the pace the server answers at.
	maxScrapes = 4
	scrapeWait = time.Second
	// maxConns bounds the open connections, and with them the memory
	// their goroutines and buffers take, far above what legitimate
	// clients open. At the bound, a new connection closes an older one
	// (see connLimit), so a probe that connects always gets in; the more
	// room, the longer a new connection has to send its request before
	// it could be the one closed.
	maxConns = 512
	// readHeaderTimeout bounds a connection that sends no request, or
	// sends it slowly; clients send their request as soon as they connect.
	readHeaderTimeout = 5 * time.Second
	// readTimeout bounds a request with a body, which no handler reads.
	readTimeout = 10 * time.Second
	// slowReader is how long a response may take to be written on top of
	// a scrape's wait for a slot and for keepalived's dump.
	slowReader = 5 * time.Second
	// idleTimeout outlasts Prometheus' default scrape interval, so that
	// its kept-alive connection lasts from one scrape to the next.
	idleTimeout = 90 * time.Second
	// maxHeaderBytes bounds the memory a request's header takes; a
	// scraper's or a probe's headers are far smaller.
	maxHeaderBytes = 16 << 10
)

// scrapeLimit serves next to at most cap(slots) requests at once; a
// request that finds none free waits up to wait for one, then gets a 503.
type scrapeLimit struct {
	next    http.Handler
	slots   chan struct{}
	wait    time.Duration
	refused prometheus.Counter
}

func newScrapeLimit(next http.Handler, n int, wait time.Duration, refused prometheus.Counter) *scrapeLimit {
	return &scrapeLimit{next: next, slots: make(chan struct{}, n), wait: wait, refused: refused}
}

func (l *scrapeLimit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case l.slots <- struct{}{}:
	default:
		t := time.NewTimer(l.wait)
		select {
		case l.slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			l.refused.Inc()
			http.Error(w, fmt.Sprintf("%d scrapes are under way already; try again later", cap(l.slots)), http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	defer func() { <-l.slots }()
	l.next.ServeHTTP(w, r)
}

// connLimit bounds a server's open connections through its ConnState
// hook, on a listener wrapped by listen. At the bound, a new connection
// closes the one that has waited longest among, in this order: those that
// have sent nothing since they connected, those kept alive that have sent
// nothing since their last request, those whose request is on its way in,
// and last those in a request. A client that sends its request as soon as
// it connects, as probes and scrapers do, counts as silent only until its
// first bytes arrive, and then goes only after every silent connection;
// connections held open and silent make room for each other.
type connLimit struct {
	max     int
	evicted prometheus.Counter

	mu sync.Mutex
	// order holds the open connections, the one whose state changed
	// longest ago first; open finds each one's element.
	order *list.List
	open  map[net.Conn]*list.Element
}

// connEntry is an open connection, its last state, and when it was
// accepted.
type connEntry struct {
	conn     net.Conn
	state    http.ConnState
	accepted time.Time
}

// newConnGrace is how long a connection accepted without a byte yet counts
// as a request on its way in (busy): a probe writes its request as soon as
// it connects, but on a loaded node its bytes may come a while after the
// handshake the kernel completed.
const newConnGrace = time.Second

func newConnLimit(n int, evicted prometheus.Counter) *connLimit {
	return &connLimit{max: n, evicted: evicted, order: list.New(), open: make(map[net.Conn]*list.Element, n)}
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateNew:
		for len(l.open) >= l.max {
			victim := l.victim()
			l.order.Remove(l.open[victim])
			delete(l.open, victim)
			// Its goroutine sees the closed connection and ends; its
			// StateClosed finds it gone.
			victim.Close()
			if l.evicted != nil {
				l.evicted.Inc()
			}
		}
		l.open[c] = l.order.PushBack(&connEntry{conn: c, state: st, accepted: time.Now()})
	case http.StateActive, http.StateIdle:
		if e, ok := l.open[c]; ok {
			e.Value.(*connEntry).state = st
			l.order.MoveToBack(e)
		}
		if tc, ok := c.(*trackedConn); ok && st == http.StateIdle {
			tc.heard.Store(false)
		}
	default: // StateHijacked, StateClosed
		if e, ok := l.open[c]; ok {
			l.order.Remove(e)
			delete(l.open, c)
		}
	}
}

// busy reports whether an open connection is in a request or has one on
// its way in: bytes read or waiting since it connected or since its last
// answer, or accepted less than newConnGrace ago without a byte yet.
func (l *connLimit) busy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for e := l.order.Front(); e != nil; e = e.Next() {
		ce := e.Value.(*connEntry)
		if ce.state == http.StateActive || heard(ce.conn) || ce.state == http.StateNew && now.Sub(ce.accepted) < newConnGrace {
			return true
		}
	}
	return false
}

// drain closes ln and returns once srv, serving on it, has answered the
// requests under way, or after wait; then it closes srv's connections.
// served is what srv.Serve returned: drain returns its error when it was
// not the closed listener's. busy tells whether a connection is still in
// a request. http.Server.Shutdown is not used: it closes, without an
// answer, a connection whose request it reads after it began, and a
// kubelet probe accepted a moment before reads EOF.
func drain(srv *http.Server, ln net.Listener, served <-chan error, busy func() bool, wait time.Duration) error {
	_ = ln.Close()
	err := <-served
	answer(srv, busy, wait)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// answer returns once srv, which accepts no more connections, has
// answered the requests under way (busy turned false), or after wait,
// and closes its connections.
func answer(srv *http.Server, busy func() bool, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for busy() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	_ = srv.Close()
}

// victim is the connection to close for room; there is one.
func (l *connLimit) victim() net.Conn {
	// The oldest of each rank but the first, which ends the search.
	var keptAlive, sending net.Conn
	for e := l.order.Front(); e != nil; e = e.Next() {
		ce := e.Value.(*connEntry)
		switch {
		case ce.state == http.StateActive:
		case heard(ce.conn):
			if sending == nil {
				sending = ce.conn
			}
		case ce.state == http.StateNew:
			return ce.conn
		case keptAlive == nil:
			keptAlive = ce.conn
		}
	}
	switch {
	case keptAlive != nil:
		return keptAlive
	case sending != nil:
		return sending
	}
	return l.order.Front().Value.(*connEntry).conn
}

// heard reports whether c's client has sent something since it connected
// or since its last request: bytes the server read (a connection from
// listen tells), or bytes the kernel holds for it unread.
func heard(c net.Conn) bool {
	if tc, ok := c.(*trackedConn); ok {
		return tc.heard.Load() || pending(tc.Conn)
	}
	return pending(c)
}

// pending reports whether the kernel holds bytes for c that nobody has
// read. A connection that cannot tell holds none.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	if err := raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return false
	}
	return n > 0
}

// listen wraps ln so that the connections it accepts tell connLimit
// whether the server has read from them: net/http reports a connection
// active only once it has read a request's whole header.
func listen(ln net.Listener) net.Listener { return trackedListener{ln} }

type trackedListener struct{ net.Listener }

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c}, nil
}

// trackedConn is an accepted connection that notes when the server reads
// from it.
type trackedConn struct {
	net.Conn
	// heard is set by a read of one byte or more, and cleared as the
	// connection goes idle between requests.
	heard atomic.Bool
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
}

// CloseWrite lets net/http half-close the connection as it would the
// TCP connection underneath, so that a client still sending gets the
// response before the connection closes.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
