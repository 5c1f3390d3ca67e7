package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Starting answers on the metrics port while the program starts, before
// the Server can: a pod that waits for the API server (the peers from the
// pods) is alive, and the kubelet's liveness probe must not restart it
// for waiting. /healthz answers 200, /readyz and everything else 503,
// saying what the program waits for.
type Starting struct {
	srv     *http.Server
	ln      *keptOpen
	conns   *connLimit
	done    chan struct{}
	stopped sync.Once
}

// ServeStarting serves the start's answers on ln until Stop; why says what
// the program waits for. ln stays open for the Server.
func ServeStarting(ln net.Listener, why func() string) (*Starting, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("the metrics port is not a TCP listener (%T)", ln)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "starting: %s\n", why())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "starting: "+why(), http.StatusServiceUnavailable)
	})
	conns := newConnLimit(maxConns, nil)
	s := &Starting{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: maxHeaderBytes,
			ConnState: conns.track},
		ln:    &keptOpen{TCPListener: tl},
		conns: conns,
		done:  make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(listen(s.ln))
	}()
	return s, nil
}

// Stop ends the start's answers and returns once the requests under way
// are answered (for up to a second); the listener is open, without a
// deadline, for the Server. Safe to call twice.
func (s *Starting) Stop() {
	s.stopped.Do(func() {
		// The listener is never closed: a deadline wakes the Accept that
		// Serve waits in, which then reports it closed.
		s.ln.stopped.Store(true)
		_ = s.ln.SetDeadline(time.Now())
		<-s.done
		_ = s.ln.SetDeadline(time.Time{})
		answer(s.srv, s.conns.busy, time.Second)
	})
}

// keptOpen is a listener whose Close leaves it open, and whose Accept
// reports it closed once stopped: the start's server ends on it, and the
// Server goes on with it.
type keptOpen struct {
	*net.TCPListener
	stopped atomic.Bool
}

func (k *keptOpen) Accept() (net.Conn, error) {
	c, err := k.TCPListener.Accept()
	if err != nil && k.stopped.Load() {
		return nil, errors.Join(net.ErrClosed, err)
	}
	return c, err
}

func (k *keptOpen) Close() error { return nil }
