package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestStarting: while the program starts, /healthz answers 200 and
// /readyz 503, each saying what it waits for; once stopped, another server
// serves on the same, still open, listener.
func TestStarting(t *testing.T) {
	ln, s := serveStarting(t)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503, "/metrics": 503} {
		code, body := get(path)
		if code != want || !strings.Contains(body, "starting: waiting for the API server") {
			t.Errorf("%s: %d %q, want %d and what it waits for", path, code, body, want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	s.Stop()
	s.Stop()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") })}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if code, body := get("/healthz"); code != 200 || body != "served" {
		t.Errorf("after Stop: %d %q, want the next server's answer", code, body)
	}
	_ = srv.Shutdown(context.Background())
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("the next server: %v", err)
	}
}

// TestStartingAnswersARequestUnderWayAsItStops: a probe the start's
// server took a moment before Stop (half of its request sent, or none
// yet) is answered by it.
func TestStartingAnswersARequestUnderWayAsItStops(t *testing.T) {
	for _, before := range requestSplits {
		t.Run(before.name, func(t *testing.T) {
			ln, s := serveStarting(t)
			stopped := make(chan struct{})
			answered := requestAcross(t, ln.Addr().String(), s.conns, before.sent, func() {
				go func() { s.Stop(); close(stopped) }()
			}, func() bool {
				// Its Serve returned: it accepts nothing more.
				select {
				case <-s.done:
					return true
				default:
					return false
				}
			})
			<-stopped
			if !strings.HasPrefix(answered, "HTTP/1.1 200") || !strings.Contains(answered, "starting: waiting for the API server") {
				t.Errorf("the request under way as the start's server stopped: %q, want its answer", answered)
			}
		})
	}
}

// serveStarting serves the start's answers, waiting for the API server,
// on a loopback port, closed at the test's end.
func serveStarting(t *testing.T) (net.Listener, *Starting) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s, err := ServeStarting(ln, func() string { return "waiting for the API server" })
	if err != nil {
		t.Fatal(err)
	}
	return ln, s
}
