package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	// Taken before listening: a probe may connect as soon as it listens.
	restarted := time.Now()
	ln, err = net.Listen("tcp", addr.String())
	if err != nil {
		p.Stop()
		t.Fatalf("listening again on %s: %v", addr, err)
	}
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
	outs := Outages(ps)
	if len(outs) != 1 {
		t.Fatalf("outages = %+v, want one", outs)
	}
	o := outs[0]
	// Generous: a loaded machine delays the ticks, not what they see.
	if o.Start.Before(stopped.Add(-50*time.Millisecond)) || o.End.Before(restarted) || o.End.After(restarted.Add(time.Second)) || o.Reason != "refused" {
		t.Errorf("outage %s..%s (%s), want from about %s to after %s, refused",
			o.Start.Format(time.StampMilli), o.End.Format(time.StampMilli), o.Reason, stopped.Format(time.StampMilli), restarted.Format(time.StampMilli))
	}
}

// TestProberStall stops this very process (SIGSTOP; a shell sends SIGCONT
// half a second later), as a machine that does not run the harness for a
// while: the prober records the stall as a gap between its rounds. (That
// the probes it made time out are left out is TestAnalyseStalls's.)
func TestProberStall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "here") })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	var d net.Dialer
	p := StartProber(t.Context(), d.DialContext, []netip.AddrPort{netip.MustParseAddrPort(ln.Addr().String())}, 10*time.Millisecond, 100*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	// SIGCONT again and again: if this process runs late, a single one
	// could come before the stop. The shell says when it runs.
	cont := exec.Command("sh", "-c", fmt.Sprintf("echo running; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.5; kill -CONT %d; done", os.Getpid()))
	out, err := cont.StdoutPipe()
	if err == nil {
		err = cont.Start()
	}
	if err == nil {
		_, err = bufio.NewReader(out).ReadString('\n')
	}
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	// To this thread: it stops on its way out of the call, not some time
	// after it, while another thread takes the signal.
	runtime.LockOSThread()
	stopped := time.Now()
	err = unix.Tgkill(os.Getpid(), unix.Gettid(), unix.SIGSTOP)
	resumed := time.Now()
	runtime.UnlockOSThread()
	_ = cont.Process.Kill()
	_ = cont.Wait()
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	if resumed.Sub(stopped) < 400*time.Millisecond {
		p.Stop()
		t.Fatalf("stopped for %s, want half a second", resumed.Sub(stopped))
	}
	time.Sleep(300 * time.Millisecond)
	ps := p.Stop()[0]
	stalls := p.Stalls()
	if !slices.ContainsFunc(stalls, func(s Interval) bool {
		return s.Len() >= resumed.Sub(stopped)-50*time.Millisecond && s.Overlaps(Interval{stopped, resumed})
	}) {
		t.Fatalf("stalls %+v, want one about %s to %s", stalls, stopped.Format(time.StampMilli), resumed.Format(time.StampMilli))
	}
	// No round was sent in the stall (a probe of the round before may
	// begin a little after it), and what the client saw stays
	// honest: no outage once what timed out in it is left out (the
	// server answered all along).
	for _, pr := range ps {
		if slices.ContainsFunc(stalls, func(s Interval) bool { return pr.Sent.After(s.Start.Add(10*time.Millisecond)) && pr.Sent.Before(s.End) }) {
			t.Errorf("a probe sent at %s, inside a stall %+v", pr.Sent.Format(time.StampMilli), stalls)
		}
	}
	kept, left := (&Data{Stalls: stalls}).outsideStalls(ps)
	if outs := Outages(kept); len(outs) != 0 {
		t.Errorf("outages %+v with the stalled probes left out, want none", outs)
	}
	t.Logf("stopped %s; %d probes, %d outages counting every probe, %d timeouts left out", resumed.Sub(stopped).Round(time.Millisecond), len(ps), len(Outages(ps)), left)
}
