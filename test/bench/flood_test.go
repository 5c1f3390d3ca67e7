package bench

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// TestFlood: the flooder's scrapers send every request with a query
// string of its own, and its silent connections count the server closing
// them.
func TestFlood(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	queries := map[string]int{}
	requests := 0
	silentClosed := 0
	active := map[net.Conn]bool{}
	check := func() {
		if requests >= 50 && silentClosed >= 4 {
			cancel()
		}
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		queries[r.URL.RawQuery]++
		requests++
		check()
	}))
	// Silent connections are closed once they have sent no header for
	// this long.
	srv.Config.ReadHeaderTimeout = 50 * time.Millisecond
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateActive:
			active[c] = true
		case http.StateClosed:
			if !active[c] {
				silentClosed++
				check()
			}
		}
	}
	srv.Start()
	defer srv.Close()
	u, err := url.Parse(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res := flood(ctx, u, 3, 2)
	mu.Lock()
	defer mu.Unlock()
	if res.OK < 50 || res.IdleClosed < 1 || res.Errors != 0 {
		t.Errorf("flood: %+v, want at least 50 answered, a silent connection closed, no error", res)
	}
	for q, n := range queries {
		if n != 1 || q == "" {
			t.Errorf("the query string %q came %d times", q, n)
		}
	}
}
