package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

func TestAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"name", "HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nnode2\n", "node2"},
		{"HTTP/1.1", "HTTP/1.1 200 OK\r\n\r\nnode1", "node1"},
		{"not 200", "HTTP/1.0 503 Service Unavailable\r\n\r\nnode2\n", ""},
		{"no body", "HTTP/1.0 200 OK\r\n", ""},
		{"not HTTP", "node2\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := answer([]byte(tc.in)); got != tc.want {
				t.Errorf("answer(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "refused"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "reset"},
		{syscall.EHOSTUNREACH, "unreachable"},
		{context.DeadlineExceeded, "timeout"},
		{errors.New("no name in the answer"), "no name in the answer"},
	} {
		if got := reason(tc.err); got != tc.want {
			t.Errorf("reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestProber probes a real server on the loopback address, stops it for a
// while and starts it again: the probes show one outage of about that
// length, refused, and the server's name otherwise.
func TestProber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "here") })}
		go func() { _ = srv.Serve(ln) }()
		return srv
	}
	srv := serve(ln)
	var d net.Dialer
	p := StartProber(t.Context(), d.DialContext, []netip.AddrPort{addr}, 10*time.Millisecond, time.Second)
	time.Sleep(300 * time.Millisecond)
	srv.Close()
	stopped := time.Now()
	time.Sleep(500 * time.Millisecond)
	ln, err = net.Listen("tcp", addr.String())
	if err != nil {
		p.Stop()
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	restarted := time.Now()
	srv = serve(ln)
	defer srv.Close()
	time.Sleep(300 * time.Millisecond)
	ps := p.Stop()[0]

	if len(ps) < 50 {
		t.Fatalf("%d probes in 1.1 s at 10 ms, want at least 50", len(ps))
	}
	for i, pr := range ps {
		if i > 0 && pr.Sent.Before(ps[i-1].Sent) {
			t.Fatalf("probes out of order at %d", i)
		}
		if pr.OK && pr.Node != "here" {
			t.Errorf("probe %d answered %q, want here", i, pr.Node)
		}
	}
	os := Outages(ps)
	if len(os) != 1 {
		t.Fatalf("outages = %+v, want one", os)
	}
	o := os[0]
	// Generous: a loaded machine delays the ticks, not what they see.
	if o.Start.Before(stopped.Add(-50*time.Millisecond)) || o.End.Before(restarted) || o.End.After(restarted.Add(time.Second)) || o.Reason != "refused" {
		t.Errorf("outage %s..%s (%s), want from about %s to after %s, refused",
			o.Start.Format(time.StampMilli), o.End.Format(time.StampMilli), o.Reason, stopped.Format(time.StampMilli), restarted.Format(time.StampMilli))
	}
}
