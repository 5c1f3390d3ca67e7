package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipfailover/ipfailover/test/syncbuf"
)

const ns = "ipfailover"

func pod(name string, labels map[string]string, annotation string) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
	}
	if annotation != "" {
		p.Annotations = map[string]string{Annotation: annotation}
	}
	return p
}

func workload(hash string) map[string]string {
	return map[string]string{"app": "ipfailover", "pod-template-hash": hash}
}

func newClient(objs ...runtime.Object) *fake.FakeMetadataClient {
	s := fake.NewTestScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		panic(err)
	}
	client := fake.NewSimpleMetadataClient(s, objs...)
	// The fake's own watch, which also says when the first watch of the
	// pods is open (start waits for it). A test's reactors prepended
	// later come first.
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if a, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = a.ListOptions
		}
		wi, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		if action.GetResource() == pods {
			once.Do(func() { close(watching) })
		}
		return true, wi, nil
	})
	watchStarted.Store(client, watching)
	return client
}

// watchStarted maps a client of newClient to the channel its first watch
// of the pods closes.
var watchStarted sync.Map

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var cmpAddrs = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestView(t *testing.T) {
	leaving := pod("d", nil, "192.0.2.14")
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	v := viewOf([]*metav1.PartialObjectMetadata{
		pod("c", nil, "192.0.2.13,2001:db8::13"),
		pod("a", nil, "192.0.2.11"),
		pod("b", nil, ""),
		leaving,
		pod("e", nil, "192.0.2.300"),
		pod("f", nil, "192.0.2.11"), // the same node as a: listed once
		pod("g", nil, "0.0.0.0"),
		pod("h", nil, "192.0.2.18,192.0.2.19"),
	}, "a")
	var got []string
	for _, m := range v.Members {
		got = append(got, fmt.Sprintf("%s in=%v self=%v terminating=%v %v: %s", m.Pod, m.In, m.Self, m.Terminating, m.Addrs, m.Why))
	}
	want := []string{
		"a in=true self=true terminating=false [192.0.2.11]: this pod",
		"b in=false self=false terminating=false []: publishes no address yet: starting, or an older image or multicast mode (multicast VRRP)",
		"c in=true self=false terminating=false [192.0.2.13 2001:db8::13]: running",
		"d in=true self=false terminating=true [192.0.2.14]: terminating: listed until it is gone, so that its goodbye adverts are heard",
		`e in=false self=false terminating=false []: its ipfailover/unicast-src-ip annotation "192.0.2.300" is not an address list: "192.0.2.300" is not a unicast address`,
		"f in=true self=false terminating=false [192.0.2.11]: running",
		`g in=false self=false terminating=false []: its ipfailover/unicast-src-ip annotation "0.0.0.0" is not an address list: "0.0.0.0" is not a unicast address`,
		`h in=false self=false terminating=false []: its ipfailover/unicast-src-ip annotation "192.0.2.18,192.0.2.19" is not an address list: two addresses of one family`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("members (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(addrs("192.0.2.13", "192.0.2.14", "2001:db8::13"), v.Peers(), cmpAddrs); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"b", "e", "g", "h"}, v.Unpublished()); diff != "" {
		t.Errorf("unpublished (-want +got):\n%s", diff)
	}
}

// testHold is the watchers' Options.Hold here.
const testHold = 300 * time.Millisecond

// watcher starts a Watcher on client for pod "self" publishing addr.
func watcher(t *testing.T, client *fake.FakeMetadataClient, addr string) (*Watcher, *syncbuf.Buffer) {
	t.Helper()
	var log syncbuf.Buffer
	w := New(Options{Client: client, Namespace: ns, Pod: "self", Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond, Hold: testHold})
	start(t, client, w, &log, addrs(addr))
	return w, &log
}

// start prepares w, runs it until the test ends, and waits until it is in
// sync.
//
// The fake client delivers a change only to the watches open when it is
// made, and an informer opens its watch after the list that syncs it: a
// test that changed a pod right after Synced could lose the event (a
// fresh machine under -race did, once in a whole run). So start also
// waits for the watch of the pods (see newClient).
func start(t *testing.T, client *fake.FakeMetadataClient, w *Watcher, log *syncbuf.Buffer, publish []netip.Addr) {
	t.Helper()
	watching, _ := watchStarted.Load(client)
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Prepare(ctx, publish); err != nil {
		cancel()
		t.Fatalf("Prepare: %v\n%s", err, log.String())
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if err := w.Synced(ctx); err != nil {
		t.Fatalf("Synced: %v\n%s", err, log.String())
	}
	if watching == nil {
		return // the test answers the watches itself
	}
	select {
	case <-watching.(chan struct{}):
	case <-time.After(30 * time.Second):
		t.Fatalf("the watcher never watched the pods\n%s", log.String())
	}
}

// waitView waits until the view satisfies cond.
func waitView(t *testing.T, w *Watcher, what string, cond func(View) bool) View {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		v := w.View()
		if cond(v) {
			return v
		}
		select {
		case <-w.Changes():
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("view never %s: %+v", what, v)
		}
	}
}

func peersAre(want ...string) func(View) bool {
	return func(v View) bool { return fmt.Sprint(v.Peers()) == fmt.Sprint(addrs(want...)) }
}

// TestWatcherFollowsTheWorkload: Start publishes this pod's address, selects
// the workload by the pod's labels but its revision label (so pods of
// another revision are members), and the view follows joins, updates,
// terminating pods (still in) and deletions.
func TestWatcherFollowsTheWorkload(t *testing.T) {
	client := newClient(
		pod("self", workload("new"), ""),
		pod("old-1", workload("old"), ""),
		pod("b", workload("new"), "192.0.2.12"),
		pod("other-app", map[string]string{"app": "web"}, "192.0.2.99"),
	)
	w, _ := watcher(t, client, "192.0.2.11")
	if got := w.Selector(); got != "app=ipfailover" {
		t.Errorf("selector %q, want app=ipfailover", got)
	}
	self, err := client.Resource(pods).Namespace(ns).Get(context.Background(), "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := self.Annotations[Annotation]; got != "192.0.2.11" {
		t.Errorf("published %q, want 192.0.2.11", got)
	}
	v := w.View()
	if diff := cmp.Diff(addrs("192.0.2.12"), v.Peers(), cmpAddrs); diff != "" {
		t.Errorf("peers after Start (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"old-1"}, v.Unpublished()); diff != "" {
		t.Errorf("unpublished (-want +got):\n%s", diff)
	}

	tracker := client.Tracker()
	if err := tracker.Add(pod("c", workload("new"), "192.0.2.13")); err != nil {
		t.Fatal(err)
	}
	waitView(t, w, "shows the new pod c", peersAre("192.0.2.12", "192.0.2.13"))

	leaving := pod("b", workload("new"), "192.0.2.12")
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if err := tracker.Update(pods, leaving, ns); err != nil {
		t.Fatal(err)
	}
	v = waitView(t, w, "shows b terminating", func(v View) bool {
		for _, m := range v.Members {
			if m.Pod == "b" {
				return m.Terminating
			}
		}
		return false
	})
	if !peersAre("192.0.2.12", "192.0.2.13")(v) {
		t.Errorf("a terminating pod left the peers: %v", v.Peers())
	}
	if err := tracker.Delete(pods, ns, "b"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	// Gone, b's address is held as a peer for the hold, then goes.
	v = waitView(t, w, "shows b gone and its address held", func(v View) bool {
		return len(v.Members) == 3 && len(v.Held) == 1
	})
	if h := v.Held[0]; h.Addr.String() != "192.0.2.12" || h.Pod != "b" || !peersAre("192.0.2.12", "192.0.2.13")(v) {
		t.Errorf("held %+v, peers %v: want b's 192.0.2.12 held, a peer still", v.Held, v.Peers())
	}
	waitView(t, w, "without b", peersAre("192.0.2.13"))
	if d := time.Since(deleted); d < testHold {
		t.Errorf("b's address went %s after b, before the hold (%s)", d, testHold)
	}

	// Another node renumbered: its old address is held as a peer, next
	// to the new one, then goes.
	if err := tracker.Update(pods, pod("c", workload("new"), "192.0.2.71"), ns); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	v = waitView(t, w, "shows c's new address", peersAre("192.0.2.13", "192.0.2.71"))
	if len(v.Held) != 1 || v.Held[0].Pod != "c" || v.Held[0].Addr.String() != "192.0.2.13" {
		t.Errorf("held %+v, want c's former address 192.0.2.13", v.Held)
	}
	waitView(t, w, "without c's old address", peersAre("192.0.2.71"))
	if d := time.Since(changed); d < testHold {
		t.Errorf("c's old address went after %s, before the hold (%s)", d, testHold)
	}

	// A renumbered node: the pod publishes its new address.
	if err := w.Publish(context.Background(), addrs("192.0.2.21")); err != nil {
		t.Fatal(err)
	}
	waitView(t, w, "shows this pod's new address", func(v View) bool {
		for _, m := range v.Members {
			if m.Self {
				return fmt.Sprint(m.Addrs) == "[192.0.2.21]"
			}
		}
		return false
	})
	if h := w.Health(); !h.Up || h.Errors != 0 {
		t.Errorf("health %+v, want up without errors", h)
	}
}

// TestComebackWithinTheHold: a pod replaced by one with the same address
// (deleted and recreated, drained and uncordoned) within the hold leaves
// the peers as they were throughout: keepalived is not reloaded for it.
func TestComebackWithinTheHold(t *testing.T) {
	client := newClient(pod("self", workload("x"), ""), pod("b", workload("x"), "192.0.2.12"))
	var log syncbuf.Buffer
	w := New(Options{Client: client, Namespace: ns, Pod: "self", Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond, Hold: 5 * time.Second})
	start(t, client, w, &log, addrs("192.0.2.11"))
	var seen []string
	record := func(v View) { seen = append(seen, fmt.Sprint(v.Peers())) }
	record(w.View())
	tracker := client.Tracker()
	if err := tracker.Delete(pods, ns, "b"); err != nil {
		t.Fatal(err)
	}
	record(waitView(t, w, "without the pod b", func(v View) bool { return len(v.Members) == 1 }))
	if err := tracker.Add(pod("b-2", workload("x"), "192.0.2.12")); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, w, "with b-2", func(v View) bool { return len(v.Members) == 2 })
	record(v)
	if len(v.Held) != 0 {
		t.Errorf("held %+v: b-2 has the address again, want nothing held", v.Held)
	}
	for _, p := range seen {
		if p != "[192.0.2.12]" {
			t.Errorf("peers went %v while b was replaced, want [192.0.2.12] throughout", seen)
			break
		}
	}
}

// TestWatcherWaitsForTheAPIServer: while the API server refuses, Start
// keeps trying and the health is down, with the error counted and logged
// once; when it answers, Start goes on and the health is up again.
func TestWatcherWaitsForTheAPIServer(t *testing.T) {
	client := newClient(pod("self", workload("x"), ""))
	var refusals atomic.Int32
	client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refusals.Add(1) <= 5 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	w, log := watcher(t, client, "192.0.2.11")
	h := w.Health()
	if !h.Up || h.Errors != 5 {
		t.Errorf("health %+v, want up after 5 errors", h)
	}
	if n := strings.Count(log.String(), "API server request failed"); n != 1 {
		t.Errorf("the failure is logged %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "API server answers again") {
		t.Errorf("the recovery is not logged:\n%s", log.String())
	}
}

// TestWatchFailureKeepsTheView: when the watch fails (the API server went
// away), the health goes down and the view stays what it was, whatever
// happens meanwhile; when the API server answers again, the view catches
// up by itself and the health is up.
func TestWatchFailureKeepsTheView(t *testing.T) {
	client := newClient(pod("self", workload("x"), ""), pod("b", workload("x"), "192.0.2.12"))
	var down atomic.Bool
	// What a client sees of a stopped API server: the reflector retries
	// such a watch by itself, without telling the watch error handler.
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	// missed are the changes made while the API server was away, which
	// the next watch (from the last resource version) replays, as the API
	// server's history does; the fake's watches do not.
	missed := make(chan *metav1.PartialObjectMetadata, 10)
	watches := make(chan *watch.FakeWatcher, 100)
	watchStarted.Delete(client) // its watches are this test's
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, refused
		}
		fw := watch.NewFakeWithChanSize(10, false)
		for len(missed) > 0 {
			fw.Add(<-missed)
		}
		watches <- fw
		return true, fw, nil
	})
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	w, _ := watcher(t, client, "192.0.2.11")
	before := w.View()

	// The API server goes away: the running watch, older than a second
	// (the reflector reports a shorter one as a failure by itself), ends.
	running := <-watches
	time.Sleep(1500 * time.Millisecond)
	down.Store(true)
	running.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for w.Health().Up {
		if time.Now().After(deadline) {
			t.Fatal("health never went down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := pod("c", workload("x"), "192.0.2.13")
	if err := client.Tracker().Add(c); err != nil {
		t.Fatal(err)
	}
	missed <- c
	time.Sleep(100 * time.Millisecond)
	if !w.View().Equal(before) {
		t.Errorf("the view changed while the API server was away: %+v, was %+v", w.View(), before)
	}
	if h := w.Health(); h.Errors == 0 || h.Err == nil {
		t.Errorf("health %+v: want the failures counted", h)
	}

	down.Store(false)
	waitView(t, w, "shows c once the API server is back", peersAre("192.0.2.12", "192.0.2.13"))
	for !w.Health().Up {
		if time.Now().After(deadline) {
			t.Fatal("health never came back up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLook: one read and one list, the workload's pods only.
func TestLook(t *testing.T) {
	client := newClient(
		pod("self", workload("a"), "192.0.2.11"),
		pod("b", workload("b"), "192.0.2.12"),
		pod("web", map[string]string{"app": "web", "pod-template-hash": "a"}, "192.0.2.99"),
	)
	v, sel, err := Look(context.Background(), client, ns, "self")
	if err != nil {
		t.Fatal(err)
	}
	if sel != "app=ipfailover" || fmt.Sprint(v.Peers()) != "[192.0.2.12]" || len(v.Members) != 2 {
		t.Errorf("selector %q, view %+v", sel, v)
	}
	if _, _, err := Look(context.Background(), client, ns, "gone"); err == nil || !strings.Contains(err.Error(), "reading this pod (ipfailover/gone)") {
		t.Errorf("Look of a missing pod: %v", err)
	}
	if _, _, err := Look(context.Background(), newClient(pod("bare", map[string]string{"pod-template-hash": "x"}, "")), ns, "bare"); err == nil || !strings.Contains(err.Error(), "no labels") {
		t.Errorf("Look of a pod without labels: %v", err)
	}
}
