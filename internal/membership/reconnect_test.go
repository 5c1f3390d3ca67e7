package membership

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipfailover/ipfailover/test/syncbuf"
)

// stallProxy relays TCP connections to a server; stall makes the
// connections open now stop relaying, the way a connection from an address
// the node no longer has goes silent. New connections relay.
type stallProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []*relayed
}

type relayed struct {
	mu      sync.Mutex
	stalled bool
}

func (r *relayed) live() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.stalled
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.relay(c)
		}
	}()
	return p
}

func (p *stallProxy) relay(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	r := &relayed{}
	p.mu.Lock()
	p.conns = append(p.conns, r)
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				dst.Close()
				return
			}
			if !r.live() {
				continue // swallowed: nothing reaches the other side
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	go pipe(s, c)
	pipe(c, s)
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.conns {
		r.mu.Lock()
		r.stalled = true
		r.mu.Unlock()
	}
}

// TestRenumberedPublishesOverNewConnections: after this node's address
// changed, the connections open to the API server go silent; Renumbered
// publishes the new address at once over a new one, where Publish alone
// would wait on the silent connection until its context ends.
func TestRenumberedPublishesOverNewConnections(t *testing.T) {
	var mu sync.Mutex
	var published []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/api/v1/namespaces/"+ns+"/pods/self" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		var patch struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &patch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		published = append(published, patch.Metadata.Annotations[Annotation])
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
			"metadata": map[string]any{"name": "self", "namespace": ns, "annotations": patch.Metadata.Annotations},
		})
	}))
	defer srv.Close()
	p := newStallProxy(t, srv.Listener.Addr().String())
	client, err := clientFor(&rest.Config{Host: "http://" + p.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	w := New(Options{Client: client, Reconnect: client.CloseConnections, Namespace: ns, Pod: "self",
		Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond})
	ctx := context.Background()
	if err := w.Publish(ctx, addrs("192.0.2.11")); err != nil {
		t.Fatalf("Publish: %v\n%s", err, log.String())
	}

	// The control: over the silent connection, Publish waits it out.
	p.stall()
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = w.Publish(cctx, addrs("192.0.2.71"))
	cancel()
	if err == nil {
		t.Fatal("Publish over a silent connection succeeded: the proxy does not stall, the test cannot tell")
	}

	// (The cancelled request took its connection with it: open another.)
	if err := w.Publish(ctx, addrs("192.0.2.73")); err != nil {
		t.Fatalf("Publish: %v\n%s", err, log.String())
	}
	// Renumbered dials again.
	p.stall()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Renumbered(rctx, addrs("192.0.2.72")); err != nil {
		t.Fatalf("Renumbered: %v\n%s", err, log.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if got := published[len(published)-1]; got != "192.0.2.72" {
		t.Errorf("the API server got %q last (all: %q), want 192.0.2.72", got, published)
	}
}

// TestQuickRetry: a patch that fails without an answer from the API server
// (it went out on a connection Renumbered had just closed) is tried again
// at once, not a Retry later; a second such failure in a row, or a refusal
// by the API server itself, waits the Retry.
func TestQuickRetry(t *testing.T) {
	closed := &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}
	busy := apierrors.NewTooManyRequests("slow down", 1)
	for _, tc := range []struct {
		name     string
		failures []error
		// quick: Publish succeeds although Retry is an hour.
		quick bool
	}{
		{"a closed connection", []error{closed}, true},
		{"two in a row", []error{closed, closed}, false},
		{"the API server refuses", []error{busy}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(pod("self", workload("x"), ""))
			var patches atomic.Int32
			client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if n := int(patches.Add(1)); n <= len(tc.failures) {
					return true, nil, tc.failures[n-1]
				}
				return false, nil, nil
			})
			w := New(Options{Client: client, Namespace: ns, Pod: "self", Retry: time.Hour})
			// Generous for the quick case; ended early in the others, whose
			// Publish would wait the hour.
			timeout := 30 * time.Second
			if !tc.quick {
				timeout = 500 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := w.Publish(ctx, addrs("192.0.2.11"))
			if tc.quick && err != nil {
				t.Fatalf("Publish: %v (%d patches): the retry after a closed connection waited the Retry", err, patches.Load())
			}
			if !tc.quick && err == nil {
				t.Fatalf("Publish succeeded after %d patches: the retry did not wait the Retry", patches.Load())
			}
			if want := len(tc.failures); tc.quick && int(patches.Load()) != want+1 || !tc.quick && int(patches.Load()) != want {
				t.Errorf("%d patches", patches.Load())
			}
		})
	}
}
