package metrics

import (
	"bytes"
	"net/http"
	"sync"
	"time"
)

// sharedResponse serves one rendered /metrics response to every scrape
// that arrives while it is rendered or within maxAge after, per key (the
// negotiated format), instead of each gathering, encoding and allocating
// on its own. The figures are as fresh as the keepalived dump they come
// from, which is reused for the same time anyway. What a request carries
// beyond its key (the query string, other headers) cannot ask for a
// rendering of its own: the rendering is made from a request without a
// query string, so that it suits every scrape of its key.
type sharedResponse struct {
	next   http.Handler
	maxAge time.Duration
	// key names what tells renderings apart; it must take few values
	// whatever the requests carry, as every value costs a rendering.
	key func(*http.Request) string
	// state describes what the response depends on beyond time (whether
	// keepalived is alive, and which process it is); a rendering made in
	// another state is never served.
	state func() string

	mu      sync.Mutex
	entries map[string]*sharedEntry
}

type sharedEntry struct {
	done   chan struct{} // closed when the fields below are set
	state  string
	at     time.Time
	status int
	header http.Header
	body   []byte
}

// newSharedResponse shares next's renderings by key. maxAge <= 0 shares a
// rendering only with the scrapes that arrive while it is under way.
func newSharedResponse(next http.Handler, maxAge time.Duration, key func(*http.Request) string, state func() string) *sharedResponse {
	return &sharedResponse{next: next, maxAge: maxAge, key: key, state: state, entries: map[string]*sharedEntry{}}
}

func (s *sharedResponse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := s.key(r)
	state := s.state()
	s.mu.Lock()
	now := time.Now()
	e, ok := s.entries[key]
	fresh := ok && e.state == state && (e.at.IsZero() || now.Sub(e.at) < s.maxAge)
	if !fresh {
		// Forget stale renderings.
		for k, old := range s.entries {
			if !old.at.IsZero() && now.Sub(old.at) >= s.maxAge {
				delete(s.entries, k)
			}
		}
		e = &sharedEntry{done: make(chan struct{}), state: state}
		s.entries[key] = e
	}
	s.mu.Unlock()

	if !fresh {
		s.render(key, e, r)
	} else {
		select {
		case <-e.done:
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range e.header {
		w.Header()[k] = v
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body) // a scraper that went away cannot be told
}

// render fills e from the next handler. Should that panic (net/http
// recovers the handler), e is dropped and the requests waiting on it get
// a 500, not a wait until their deadline.
func (s *sharedResponse) render(key string, e *sharedEntry, r *http.Request) {
	done := false
	defer func() {
		if !done {
			e.status, e.header, e.body = http.StatusInternalServerError, http.Header{}, []byte("rendering the metrics failed\n")
		}
		s.mu.Lock()
		if done {
			e.at = time.Now()
		} else if s.entries[key] == e {
			delete(s.entries, key)
		}
		s.mu.Unlock()
		close(e.done)
	}()
	if r.URL.RawQuery != "" {
		r = r.Clone(r.Context())
		r.URL.RawQuery = ""
	}
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	s.next.ServeHTTP(rec, r)
	e.status, e.header, e.body = rec.status, rec.header, rec.buf.Bytes()
	done = true
}

// recorder keeps a response in memory.
type recorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *recorder) WriteHeader(status int)      { r.status = status }
