package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// eventsServer is an API server that keeps the events written to it; down
// makes it drop every connection unanswered.
type eventsServer struct {
	t  *testing.T
	mu sync.Mutex
	// created are the events created, patches the series written, in
	// order; down drops the requests.
	created []map[string]any
	patches []map[string]any
	down    bool
	srv     *httptest.Server
}

func newEventsServer(t *testing.T) *eventsServer {
	s := &eventsServer{t: t}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *eventsServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			c.Close()
		}
		return
	}
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ipfailover/pods/self":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"self","namespace":"ipfailover","uid":"uid-of-self"}}`)
	case r.Method == http.MethodPost && r.URL.Path == "/apis/events.k8s.io/v1/namespaces/ipfailover/events":
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			s.t.Errorf("an event that is not JSON: %v", err)
		}
		s.mu.Lock()
		s.created = append(s.created, ev)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/apis/events.k8s.io/v1/namespaces/ipfailover/events/"):
		if ct := r.Header.Get("Content-Type"); ct != "application/merge-patch+json" {
			s.t.Errorf("a patch of %s", ct)
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			s.t.Errorf("a patch that is not JSON: %v", err)
		}
		p["name"] = strings.TrimPrefix(r.URL.Path, "/apis/events.k8s.io/v1/namespaces/ipfailover/events/")
		s.mu.Lock()
		s.patches = append(s.patches, p)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	default:
		s.t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
	}
}

func (s *eventsServer) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *eventsServer) counts() (created, patched int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created), len(s.patches)
}

// lockedBuffer is a log both the writer and the test use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startEvents runs Events against s until the test ends.
func startEvents(t *testing.T, s *eventsServer, o EventsOptions) (*Events, *lockedBuffer) {
	t.Helper()
	cfg := &rest.Config{Host: s.srv.URL}
	ec, err := NewEventsClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	o.Client, o.Pods = ec, pods
	o.Namespace, o.Pod, o.Instance = "ipfailover", "self", "node1"
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	e := NewEvents(o)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return e, logs
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventOnThePod(t *testing.T) {
	s := newEventsServer(t)
	e, _ := startEvents(t, s, EventsOptions{})
	e.Record(Event{Reason: "VIPTaken", Action: "Take", Note: "node1 took 192.0.2.10 from pod ipfailover-b (10.0.0.2): its adverts stopped"})
	e.Record(Event{Warning: true, Reason: "CheckFailing", Action: "GiveUp", Note: "port 80: connection refused"})
	eventually(t, "two events created", func() bool { c, _ := s.counts(); return c == 2 })
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.created[0]
	want := map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event", "reason": "VIPTaken", "action": "Take", "type": "Normal",
		"reportingController": "ipfailover", "reportingInstance": "node1",
		"note": "node1 took 192.0.2.10 from pod ipfailover-b (10.0.0.2): its adverts stopped",
	}
	for k, v := range want {
		if ev[k] != v {
			t.Errorf("%s = %v, want %v", k, ev[k], v)
		}
	}
	ref, _ := ev["regarding"].(map[string]any)
	if ref["kind"] != "Pod" || ref["name"] != "self" || ref["namespace"] != "ipfailover" || ref["uid"] != "uid-of-self" {
		t.Errorf("regarding = %v, want this pod with its uid (kubectl describe pod finds events by it)", ref)
	}
	meta, _ := ev["metadata"].(map[string]any)
	if name, _ := meta["name"].(string); !strings.HasPrefix(name, "self.") || meta["namespace"] != "ipfailover" {
		t.Errorf("metadata = %v", meta)
	}
	if et, _ := ev["eventTime"].(string); et == "" {
		t.Error("no eventTime (the API server requires it)")
	}
	if s.created[1]["type"] != "Warning" {
		t.Errorf("the failing check's event is %v, want Warning", s.created[1]["type"])
	}
}

// A flapping check's events fold into one event's series, and its writes
// stay within the reason's bound however often it flaps.
func TestEventsOfAFlappingCheck(t *testing.T) {
	s := newEventsServer(t)
	e, logs := startEvents(t, s, EventsOptions{Burst: 3, Refill: time.Hour})
	for range 50 {
		e.Record(Event{Warning: true, Reason: "CheckFailing", Action: "GiveUp", Note: "port 80: connection refused"})
	}
	for i := range 20 {
		e.Record(Event{Reason: "VIPTaken", Action: "Take", Note: "took 192.0.2." + string(rune('a'+i))})
	}
	eventually(t, "the bound of VIPTaken said", func() bool { return strings.Contains(logs.String(), "over the bound of their reason") })
	eventually(t, "three writes of each reason", func() bool { c, p := s.counts(); return c+p == 6 })
	time.Sleep(1500 * time.Millisecond) // a flush: nothing more may be written
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.created) != 4 || len(s.patches) != 2 {
		t.Fatalf("%d events created, %d series written; want 4 (1 CheckFailing, 3 VIPTaken) and 2", len(s.created), len(s.patches))
	}
	series, _ := s.patches[1]["series"].(map[string]any)
	if n, _ := series["count"].(float64); n != 3 {
		t.Errorf("the second series write counts %v, want 3", series["count"])
	}
	if t0, _ := series["lastObservedTime"].(string); t0 == "" {
		t.Error("a series without lastObservedTime")
	}
}

// The count of repeats not written when they happened is written once the
// bound allows.
func TestEventSeriesCatchesUp(t *testing.T) {
	s := newEventsServer(t)
	e, _ := startEvents(t, s, EventsOptions{Burst: 1, Refill: 300 * time.Millisecond})
	for range 5 {
		e.Record(Event{Reason: "CheckPassing", Action: "Resume", Note: "port 80 answers"})
	}
	eventually(t, "the series counts 5", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.patches) == 0 {
			return false
		}
		series, _ := s.patches[len(s.patches)-1]["series"].(map[string]any)
		n, _ := series["count"].(float64)
		return n == 5
	})
	if c, p := s.counts(); c != 1 || p > 4 {
		t.Errorf("%d created, %d patches; want 1 and at most 4", c, p)
	}
}

// An API server that does not answer loses the events, never blocks
// Record, and the log says so once per outage with how many were lost.
func TestEventsWhileTheAPIServerIsDown(t *testing.T) {
	s := newEventsServer(t)
	e, logs := startEvents(t, s, EventsOptions{Queue: 4, Timeout: 200 * time.Millisecond, Burst: 1000})
	e.Record(Event{Reason: "VIPTaken", Action: "Take", Note: "before"})
	eventually(t, "the first event", func() bool { c, _ := s.counts(); return c == 1 })
	s.setDown(true)
	for i := range 200 {
		e.Record(Event{Reason: "VIPReleased", Action: "Release", Note: "during " + string(rune('a'+i%26))})
	}
	eventually(t, "the outage said", func() bool { return strings.Contains(logs.String(), "does not answer") })
	if n := strings.Count(logs.String(), "does not answer"); n != 1 {
		t.Errorf("the outage said %d times, want once", n)
	}
	recordAfterOutage(t, s, e)
	eventually(t, "the end of the outage said", func() bool { return strings.Contains(logs.String(), "answers again") })
	l := logs.String()
	if !strings.Contains(l, "dropped=") || !strings.Contains(l, "queue is full") {
		t.Errorf("the log does not say how many events were dropped:\n%s", l)
	}
}

// Events lost while the API server does not answer leave their reason's
// bound as it was: the first events after the outage are written.
func TestEventsLostToAnOutageKeepTheirBound(t *testing.T) {
	s := newEventsServer(t)
	e, _ := startEvents(t, s, EventsOptions{Timeout: 200 * time.Millisecond, Burst: 3, Refill: time.Hour})
	e.Record(Event{Reason: "VIPTaken", Action: "Take", Note: "before"})
	eventually(t, "the first event", func() bool { c, _ := s.counts(); return c == 1 })
	s.setDown(true)
	for i := range 20 {
		e.Record(Event{Reason: "VIPTaken", Action: "Take", Note: fmt.Sprint("during ", i)})
		time.Sleep(10 * time.Millisecond)
	}
	recordAfterOutage(t, s, e)
}

// recordAfterOutage has the API server answer again and waits for an
// event recorded once the writer retries to be written.
func recordAfterOutage(t *testing.T, s *eventsServer, e *Events) {
	t.Helper()
	s.setDown(false)
	time.Sleep(retryDown)
	e.Record(Event{Reason: "VIPTaken", Action: "Take", Note: "after"})
	eventually(t, "the event after the outage", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.created[len(s.created)-1]["note"] == "after"
	})
}

// Record on a writer that is not running never blocks; a nil Events
// records nothing.
func TestRecordNeverBlocks(t *testing.T) {
	e := NewEvents(EventsOptions{Queue: 2})
	for range 1000 {
		e.Record(Event{Reason: "VIPTaken"})
	}
	if n := e.overflow.Load(); n != 998 {
		t.Errorf("%d counted as dropped, want 998", n)
	}
	var none *Events
	none.Record(Event{Reason: "VIPTaken"})
}

func TestClip(t *testing.T) {
	if got := clip("ab€", 3); got != "ab" {
		t.Errorf("clip = %q, want the whole runes only", got)
	}
	if got := clip("abc", 3); got != "abc" {
		t.Errorf("clip = %q", got)
	}
}

// The events queued when Run stops are written (a stopping pod's last
// ones), within drainTime.
func TestEventsQueuedAtStop(t *testing.T) {
	s := newEventsServer(t)
	ec, err := NewEventsClient(&rest.Config{Host: s.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEvents(EventsOptions{Client: ec, Namespace: "ipfailover", Pod: "self", Instance: "node1"})
	for _, note := range []string{"a", "b", "c"} {
		e.Record(Event{Reason: "VIPReleased", Action: "Release", Note: note})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.counts(); c != 3 {
		t.Errorf("%d of the 3 queued events written at the stop", c)
	}
}
