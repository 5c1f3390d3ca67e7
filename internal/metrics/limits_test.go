package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipfailover/ipfailover/test/wait"
)

// TestScrapesInFlightBounded: beyond maxScrapes scrapes under way, a scrape
// that has waited scrapeWait is answered 503 and counted, while the probes
// answer at once.
func TestScrapesInFlightBounded(t *testing.T) {
	s, g := gatedServer(t)
	s.SetReady(true)
	const extra = 3
	var wg sync.WaitGroup
	results := make([]scrapeResult, maxScrapes+extra)
	for i := range results {
		wg.Go(func() { results[i] = scrape(s.handler, fmt.Sprintf("/metrics?scrape=%d", i), "") })
	}
	wait.For(t, "the scrapes beyond the bound to be refused and the rendering to start", func() bool {
		return testutil.ToFloat64(s.collector.refused) == extra && g.renders.Load() > 0
	})
	if n := g.renders.Load(); n != 1 {
		t.Errorf("%d renderings under way, want 1", n)
	}
	// Every scrape slot is taken and the rendering is held: the probes
	// do not wait for either.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, s.handler, path); code != http.StatusOK {
			t.Errorf("%s while the scrapes are held: %d %q, want 200", path, code, body)
		}
	}
	close(g.release)
	wg.Wait()
	var ok, refused int
	for _, r := range results {
		switch {
		case r.code == http.StatusOK:
			ok++
		case r.code == http.StatusServiceUnavailable && strings.Contains(r.body, "try again later"):
			refused++
		default:
			t.Errorf("a scrape got %d %q", r.code, r.body)
		}
	}
	if ok != maxScrapes || refused != extra {
		t.Errorf("%d scrapes at once: %d answered, %d refused; want %d and %d", len(results), ok, refused, maxScrapes, extra)
	}
	if n := testutil.ToFloat64(s.collector.refused); n != extra {
		t.Errorf("ipfailover_metrics_scrapes_refused_total = %v, want %d", n, extra)
	}
}

// fakeConn is a net.Conn that records its Close.
type fakeConn struct {
	net.Conn
	name   string
	closed bool
}

func (c *fakeConn) Close() error { c.closed = true; return nil }

// TestConnLimitClosesTheLongestWaiting: at the bound, a new connection
// closes one that never sent a request before a kept-alive one between
// requests, and that before one in a request; the longest waiting first.
func TestConnLimitClosesTheLongestWaiting(t *testing.T) {
	for _, tt := range []struct {
		name   string
		states []http.ConnState // of the open connections, in order of their last change
		want   []int            // which close as len(states)+len(want) connections arrive
	}{
		{"silent before kept-alive", []http.ConnState{http.StateIdle, http.StateNew, http.StateActive, http.StateNew}, []int{1, 3, 0, 2}},
		{"the longest idle first", []http.ConnState{http.StateActive, http.StateIdle, http.StateIdle}, []int{1, 2, 0}},
		{"all in a request", []http.ConnState{http.StateActive, http.StateActive}, []int{0, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "evicted", Help: "Evicted."})
			l := newConnLimit(len(tt.states), evicted)
			conns := make([]*fakeConn, len(tt.states))
			for i := range conns {
				conns[i] = &fakeConn{name: fmt.Sprint(i)}
				l.track(conns[i], http.StateNew)
			}
			for i, st := range tt.states {
				if st != http.StateNew { // net/http reports StateNew once, at the accept
					l.track(conns[i], st)
				}
			}
			var got []int
			for range tt.want {
				// Each newcomer is in a request at once, so that it
				// outranks the connections that were there.
				c := &fakeConn{name: "new"}
				l.track(c, http.StateNew)
				l.track(c, http.StateActive)
				if len(l.open) > l.max {
					t.Fatalf("%d connections open, bound %d", len(l.open), l.max)
				}
				for i, old := range conns {
					if old.closed && !slices.Contains(got, i) {
						got = append(got, i)
					}
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("order of closing (-want +got):\n%s", diff)
			}
			if n := testutil.ToFloat64(evicted); n != float64(len(tt.want)) {
				t.Errorf("evicted %v, want %d", n, len(tt.want))
			}
			// A connection closed for room leaves no trace when its
			// goroutine reports it idle, then closed.
			l.track(conns[tt.want[0]], http.StateIdle)
			l.track(conns[tt.want[0]], http.StateClosed)
			if len(l.open) != l.max {
				t.Errorf("%d connections tracked after a closed one reported, want %d", len(l.open), l.max)
			}
		})
	}
}

// TestConnLimitSparesARequestOnItsWay: connections whose client has sent
// something, whether the server has read it (net/http reports a
// connection active only once it has read the whole header) or it waits
// in the kernel, are not closed for room while a silent one is open,
// however much older they are.
func TestConnLimitSparesARequestOnItsWay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tracked := listen(ln)
	// pair connects and returns both ends.
	pair := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := tracked.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return c, s
	}
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "evicted", Help: "Evicted."})
	l := newConnLimit(3, evicted)
	read, readSrv := pair()
	sending, sendingSrv := pair()
	_, silentSrv := pair()
	for _, c := range []net.Conn{readSrv, sendingSrv, silentSrv} {
		l.track(c, http.StateNew)
	}
	for _, c := range []net.Conn{read, sending} {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := readSrv.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the request to reach the server's socket", func() bool { return heard(sendingSrv) })
	if heard(silentSrv) || heard(&fakeConn{}) || !heard(readSrv) {
		t.Fatalf("heard: silent %v, a connection that cannot tell %v, one read from %v", heard(silentSrv), heard(&fakeConn{}), heard(readSrv))
	}
	_, newSrv := pair()
	l.track(newSrv, http.StateNew)
	for _, tt := range []struct {
		name string
		c    net.Conn
		open bool
	}{{"silent", silentSrv, false}, {"read from", readSrv, true}, {"with a request waiting", sendingSrv, true}, {"new", newSrv, true}} {
		if _, open := l.open[tt.c]; open != tt.open {
			t.Errorf("the %s connection open: %v, want %v", tt.name, open, tt.open)
		}
	}
	// Once answered and idle, a connection has sent nothing since.
	l.track(readSrv, http.StateIdle)
	if heard(readSrv) {
		t.Error("a connection idle between requests counts as having sent something")
	}
}

// TestScrapeLimitWaits: beyond n scrapes under way, a scrape waits for a
// slot; it gets one when a scrape ends, or a 503 once it has waited
// scrapeWait. No more than n are ever served at once.
func TestScrapeLimitWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, extra = 2, 3
		var mu sync.Mutex
		var inFlight, most int
		served := func() int {
			mu.Lock()
			defer mu.Unlock()
			return inFlight
		}
		release := make(chan struct{})
		next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			<-release
			mu.Lock()
			inFlight--
			mu.Unlock()
		})
		refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "refused", Help: "Refused."})
		l := newScrapeLimit(next, n, scrapeWait, refused)
		codes := make(chan int, n+extra)
		for range n + extra {
			go func() { codes <- scrape(l, "/metrics", "").code }()
		}
		synctest.Wait()
		if got := served(); got != n || len(codes) != 0 {
			t.Fatalf("%d scrapes served and %d answered, want %d and none", got, len(codes), n)
		}
		// One ends: a waiting scrape takes its slot.
		release <- struct{}{}
		synctest.Wait()
		if got := served(); got != n || len(codes) != 1 || <-codes != http.StatusOK {
			t.Fatalf("after one scrape ended: %d served, %d answered", got, len(codes))
		}
		// The other waiting scrapes give up.
		time.Sleep(scrapeWait)
		synctest.Wait()
		if len(codes) != extra-1 || testutil.ToFloat64(refused) != extra-1 {
			t.Fatalf("after %v: %d answered, %v refused; want %d refused", scrapeWait, len(codes), testutil.ToFloat64(refused), extra-1)
		}
		for range extra - 1 {
			if code := <-codes; code != http.StatusServiceUnavailable {
				t.Errorf("a scrape that waited %v got %d, want 503", scrapeWait, code)
			}
		}
		close(release)
		for range n {
			if code := <-codes; code != http.StatusOK {
				t.Errorf("a served scrape got %d", code)
			}
		}
		if most != n {
			t.Errorf("%d scrapes served at once, bound %d", most, n)
		}
	})
}

// TestServeBoundsConnections: over TCP, connections held open and silent
// never keep a probe out; at the bound they make room, a kept-alive
// scraper's connection stays, and an oversized header is refused.
func TestServeBoundsConnections(t *testing.T) {
	f := startFake(t, "two-master.json")
	s := newServer(t, testOptions(newProcess(f.pid), f.dump))
	const bound = 8
	s.conns = newConnLimit(bound, s.collector.evicted)
	addr, stop := serveTCP(t, s)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	base := "http://" + addr
	openConns := func() int {
		s.conns.mu.Lock()
		defer s.conns.mu.Unlock()
		return len(s.conns.open)
	}
	evicted := func() int { return int(testutil.ToFloat64(s.collector.evicted)) }

	// A scraper that keeps its connection alive between scrapes.
	kept := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer kept.CloseIdleConnections()
	if reused := getOver(t, kept, base+"/metrics"); reused {
		t.Fatal("the first scrape reused a connection")
	}
	// The rest of the bound taken by silent connections.
	var silent []net.Conn
	dialSilent := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	for range bound - 1 {
		dialSilent()
	}
	wait.For(t, "the server to track every connection", func() bool { return openConns() == bound })
	if n := evicted(); n != 0 {
		t.Fatalf("%d connections closed below the bound", n)
	}

	// A probe on a new connection gets in: the oldest silent connection
	// makes room for it. Once it is answered and closed, there is room
	// for the next.
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 {
		resp, err := probe.Get(base + "/healthz")
		if err != nil {
			t.Fatalf("probe %d at the bound: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("probe %d at the bound: %s", i, resp.Status)
		}
	}
	// A probe's connection may still be open on the server's side as
	// the next probe connects, and then makes room too.
	if n := evicted(); n < 1 || n > 3 {
		t.Errorf("3 probes at the bound closed %d connections, want 1 to 3", n)
	}
	if err := silent[0].SetReadDeadline(time.Now().Add(wait.Timeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := silent[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the oldest silent connection was not closed: %v", err)
	}
	// Only silent connections made room: the scraper's and the silent
	// ones left are open once the probes' have closed.
	wait.For(t, "the probes' connections to close", func() bool { return openConns() == 1+len(silent)-evicted() })
	for openConns() < bound {
		dialSilent()
		wait.For(t, "the server to track the new connection", func() bool { return openConns() == 1+len(silent)-evicted() })
	}

	// Many more silent connections than the bound: the open ones stay
	// at the bound, and the scraper's kept-alive connection is never the
	// one closed while silent ones are open.
	for range 3 * bound {
		want := evicted() + 1
		dialSilent()
		wait.For(t, "the newcomer to make room", func() bool { return evicted() == want })
		// The next newcomer must find this one tracked.
		wait.For(t, "the newcomer to be tracked", func() bool { return openConns() == bound })
		if n := openConns(); n > bound {
			t.Fatalf("%d connections open, bound %d", n, bound)
		}
	}
	if reused := getOver(t, kept, base+"/metrics"); !reused {
		t.Error("the scraper's kept-alive connection was closed while silent ones were open")
	}

	// A header beyond maxHeaderBytes is refused before any handler.
	req, _ := http.NewRequest("GET", base+"/healthz", http.NoBody)
	req.Header.Set("X-Padding", strings.Repeat("x", 2*maxHeaderBytes))
	resp, err := probe.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a %d-byte header: %s, want 431", 2*maxHeaderBytes, resp.Status)
	}
}

// getOver GETs url with c, wants a 200, and says whether the request
// went over a connection used before.
func getOver(t *testing.T, c *http.Client, url string) (reused bool) {
	t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return reused
}
