package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

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
		h := newSharedResponse(slow, time.Hour, func() string { return "" })

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
		h := newSharedResponse(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { renders.Add(1) }), 20*time.Millisecond, func() string { return "" })
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
	h := newSharedResponse(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { renders.Add(1) }), time.Hour, func() string { return state })
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
	}), time.Hour, func() string { return "" })
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
