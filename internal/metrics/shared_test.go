package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ipfailover/ipfailover/test/wait"
)

// byAccept keys renderings by the Accept header as sent.
func byAccept(r *http.Request) string { return r.Header.Get("Accept") }

func TestSharedResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var renders atomic.Int32
		release := make(chan struct{})
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := renders.Add(1)
			<-release
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			io.WriteString(w, "render "+string(rune('0'+n))+" for "+r.Header.Get("Accept"))
		})
		h := newSharedResponse(slow, time.Hour, byAccept, func() string { return "" })

		get := func(accept string) string {
			req := httptest.NewRequest("GET", "/metrics", http.NoBody)
			req.Header.Set("Accept", accept)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 || rec.Header().Get("Content-Type") == "" {
				t.Errorf("status %d, header %v", rec.Code, rec.Header())
			}
			return rec.Body.String()
		}

		var wg sync.WaitGroup
		bodies := make([]string, 16)
		for i := range bodies {
			wg.Go(func() { bodies[i] = get("text/plain") })
		}
		// Every scrape is now blocked: one rendering, fifteen waiting
		// for it. None has been answered yet.
		synctest.Wait()
		if n := renders.Load(); n != 1 {
			t.Fatalf("16 concurrent scrapes started %d renderings, want 1", n)
		}
		close(release)
		wg.Wait()
		for _, b := range bodies {
			if b != bodies[0] {
				t.Fatalf("scrapes got different bodies: %q and %q", b, bodies[0])
			}
		}
		if got := get("application/openmetrics-text"); got == bodies[0] || renders.Load() != 2 {
			t.Errorf("another Accept header was served the same rendering: %q", got)
		}
	})
}

func TestSharedResponseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var renders atomic.Int32
		h := newSharedResponse(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { renders.Add(1) }), 20*time.Millisecond, byAccept, func() string { return "" })
		serve := func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", http.NoBody)) }
		serve()
		time.Sleep(19 * time.Millisecond)
		serve()
		if n := renders.Load(); n != 1 {
			t.Errorf("rendered %d times within maxAge, want 1", n)
		}
		time.Sleep(time.Millisecond)
		serve()
		if n := renders.Load(); n != 2 {
			t.Errorf("rendered %d times, want 2 (one reuse, one at expiry)", n)
		}
	})
}

func TestSharedResponseNeverOutlivesItsState(t *testing.T) {
	var renders atomic.Int32
	state := "alive 17"
	h := newSharedResponse(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { renders.Add(1) }), time.Hour, byAccept, func() string { return state })
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", http.NoBody))
	state = "keepalived pid 17 is a zombie"
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", http.NoBody))
	if n := renders.Load(); n != 2 {
		t.Errorf("rendered %d times, want 2: a response from before keepalived died was served after", n)
	}
}

// TestSharedResponsePanic: a rendering that panics (net/http recovers the
// handler) leaves no entry that later scrapes would wait on forever.
func TestSharedResponsePanic(t *testing.T) {
	var calls atomic.Int32
	h := newSharedResponse(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			panic("a bug")
		}
		io.WriteString(w, "ok")
	}), time.Hour, byAccept, func() string { return "" })
	func() {
		defer func() { _ = recover() }()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", http.NoBody))
	}()
	done := make(chan string, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", http.NoBody))
		done <- rec.Body.String()
	}()
	select {
	case body := <-done:
		if body != "ok" {
			t.Errorf("the scrape after a panic got %q, want a fresh rendering", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scrape after a panic waits on the failed rendering")
	}
}

// gatedVIPs is a host.Lister whose List, which every rendering of
// /metrics calls once, counts the renderings and holds each until release
// is closed.
type gatedVIPs struct {
	renders atomic.Int32
	release chan struct{}
}

func newGatedVIPs() *gatedVIPs { return &gatedVIPs{release: make(chan struct{})} }

func (g *gatedVIPs) List(string) ([]netip.Prefix, error) {
	g.renders.Add(1)
	<-g.release
	return nil, nil
}

// gatedServer is a Server on a fake keepalived whose renderings of
// /metrics wait for g.release.
func gatedServer(t *testing.T) (*Server, *gatedVIPs) {
	t.Helper()
	f := startFake(t, "two-master.json")
	o := testOptions(newProcess(f.pid), f.dump)
	g := newGatedVIPs()
	o.VIPs = g
	o.DumpMaxAge = time.Hour
	return newServer(t, o), g
}

type scrapeResult struct {
	code        int
	contentType string
	body        string
}

func scrape(h http.Handler, target, accept string) scrapeResult {
	req := httptest.NewRequest("GET", target, http.NoBody)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return scrapeResult{rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()}
}

// TestScrapesShareOneRenderingWhateverTheQuery: scrapes of one format share
// one rendering whatever their query string or their spelling of Accept,
// and get every family (promhttp's name[] filter is not honoured); only
// another format costs another rendering.
func TestScrapesShareOneRenderingWhateverTheQuery(t *testing.T) {
	s, g := gatedServer(t)
	textAccepts := []string{"", "text/plain", "text/plain;version=0.0.4", "*/*;q=0.1", "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"}
	queries := []string{"?name[]=keepalived_up", "?a=1", "?b=2&c=3", "?x=" + strings.Repeat("y", 200), ""}
	var wg sync.WaitGroup
	results := make([]scrapeResult, maxScrapes)
	// The scrape with a name[] filter renders; the others come while it
	// does.
	wg.Go(func() { results[0] = scrape(s.handler, "/metrics"+queries[0], textAccepts[0]) })
	wait.For(t, "the first rendering", func() bool { return g.renders.Load() > 0 })
	for i := 1; i < len(results); i++ {
		wg.Go(func() { results[i] = scrape(s.handler, "/metrics"+queries[i], textAccepts[i]) })
	}
	close(g.release)
	wg.Wait()
	for i := len(results); i < len(queries); i++ {
		results = append(results, scrape(s.handler, "/metrics"+queries[i], textAccepts[i]))
	}
	if n := g.renders.Load(); n != 1 {
		t.Fatalf("%d scrapes of the text format with distinct query strings and Accept headers made %d renderings, want 1", len(results), n)
	}
	for i, r := range results {
		if r.code != http.StatusOK || r.body != results[0].body || r.contentType != results[0].contentType {
			t.Fatalf("scrape %d (%s, Accept %q): %d %q, not the shared rendering", i, queries[i], textAccepts[i], r.code, r.contentType)
		}
	}
	if !strings.Contains(results[0].body, "\nipfailover_build_info{") {
		t.Errorf("a scrape with ?name[]=keepalived_up was filtered; every scrape gets every family:\n%s", results[0].body)
	}

	proto := scrape(s.handler, "/metrics?another", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	if n := g.renders.Load(); n != 2 || proto.code != http.StatusOK || !strings.HasPrefix(proto.contentType, "application/vnd.google.protobuf") {
		t.Errorf("a protobuf scrape: %d %q after %d renderings, want its own rendering", proto.code, proto.contentType, n)
	}
}

// TestSharedRenderingWithoutMaxAge: with no reuse after a rendering, the
// scrapes that arrive while it is under way still share it, and the
// rendering is made without the query string.
func TestSharedRenderingWithoutMaxAge(t *testing.T) {
	var renders atomic.Int32
	release := make(chan struct{})
	var queries []string
	var mu sync.Mutex
	h := newSharedResponse(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		<-release
		io.WriteString(w, "ok")
	}), -1, func(*http.Request) string { return "" }, func() string { return "" })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { scrape(h, fmt.Sprintf("/metrics?n=%d", i), "") })
	}
	wait.For(t, "the rendering", func() bool { return renders.Load() > 0 })
	// Scrapes that arrived after the rendering started may still be on
	// their way in; none of them may start a second one while it runs.
	close(release)
	wg.Wait()
	scrape(h, "/metrics?after", "")
	if n := renders.Load(); n < 2 {
		t.Fatalf("%d renderings, want a fresh one after the first finished", n)
	}
	for _, q := range queries {
		if q != "" {
			t.Errorf("a rendering saw the query string %q", q)
		}
	}
}
