package membership

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipfailover/ipfailover/test/syncbuf"
)

// annotated is pod with more annotations.
func annotated(name string, labels map[string]string, addr string, more map[string]string) *metav1.PartialObjectMetadata {
	p := pod(name, labels, addr)
	for k, v := range more {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
	return p
}

func TestParseAdverts(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  Adverts
		err   bool
	}{
		{"vrrp3 0.2s", Adverts{3, 200 * time.Millisecond}, false},
		{"vrrp3 1s", Adverts{3, time.Second}, false},
		{"vrrp2 1s", Adverts{2, time.Second}, false},
		{"vrrp3 0.26s", Adverts{3, 260 * time.Millisecond}, false},
		{"vrrp3", Adverts{3, 0}, false},
		{"vrrp4 1s", Adverts{}, true},
		{"vrrp3 0s", Adverts{}, true},
		{"vrrp3 1h", Adverts{}, true},
		{"vrrp3 soon", Adverts{}, true},
		{"", Adverts{}, true},
	} {
		got, err := ParseAdverts(tt.value)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseAdverts(%q) = %+v, %v; want %+v, error %v", tt.value, got, err, tt.want, tt.err)
		}
		if err == nil {
			if s := got.String(); s != tt.value {
				t.Errorf("ParseAdverts(%q).String() = %q", tt.value, s)
			}
		}
	}
}

func FuzzParseAdverts(f *testing.F) {
	for _, s := range []string{"vrrp3 0.2s", "vrrp2 1s", "vrrp3", "vrrp3 1e3ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAdverts(s)
		if err != nil {
			return
		}
		b, err := ParseAdverts(a.String())
		if err != nil || b != a {
			t.Errorf("%q -> %+v -> %q -> %+v, %v", s, a, a.String(), b, err)
		}
	})
}

// What each kind of pod speaks, and which ones the bridge relays to.
func TestSpeaks(t *testing.T) {
	old2 := Adverts{2, time.Second}
	old3 := Adverts{3, 500 * time.Millisecond}
	for _, tt := range []struct {
		name        string
		pod         *metav1.PartialObjectMetadata
		want, want3 Adverts // with old2, with old3
	}{
		{"this image", annotated("p", workload("new"), "192.0.2.11", map[string]string{FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 0.2s"}), Adverts{3, 200 * time.Millisecond}, Adverts{3, 200 * time.Millisecond}},
		{"this image, pinned", annotated("p", workload("new"), "192.0.2.11", map[string]string{FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 2s"}), Adverts{3, 2 * time.Second}, Adverts{3, 2 * time.Second}},
		{"an image that follows the workload's interval", annotated("p", workload("new"), "192.0.2.11", map[string]string{FastAnnotation: FastValue}), Adverts{3, 0}, Adverts{3, 0}},
		{"an older image", pod("p", workload("old"), "192.0.2.11"), old2, old3},
		{"an unreadable adverts value", annotated("p", workload("old"), "192.0.2.11", map[string]string{AdvertsAnnotation: "fast"}), old2, old3},
		{"starting", pod("p", workload("new"), ""), Adverts{}, Adverts{}},
		{"starting, this image", annotated("p", workload("new"), "", map[string]string{AdvertsAnnotation: "vrrp3 0.2s"}), Adverts{}, Adverts{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := memberOf(tt.pod, "self")
			if got := m.Speaks(old2); got != tt.want {
				t.Errorf("Speaks(%+v) = %+v, want %+v", old2, got, tt.want)
			}
			if got := m.Speaks(old3); got != tt.want3 {
				t.Errorf("Speaks(%+v) = %+v, want %+v", old3, got, tt.want3)
			}
		})
	}
}

// VRRPv2 lists the IPv4 addresses of the other pods that speak VRRPv2 (not
// the held ones: Held.Speaks says what their pods spoke); Unpublished leaves
// out the pods of this pod's own template.
func TestVRRPv2AndUnpublished(t *testing.T) {
	fast := map[string]string{FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 0.2s"}
	v := viewOf([]*metav1.PartialObjectMetadata{
		annotated("self", workload("new"), "192.0.2.10", fast),
		annotated("a", workload("new"), "192.0.2.11", fast),
		pod("b", workload("old"), "192.0.2.12,2001:db8::12"),
		pod("c", workload("old"), "192.0.2.13"),
		pod("d", workload("new"), ""),
		pod("e", workload("old"), ""),
		pod("f", map[string]string{"app": "ipfailover"}, ""),
	}, "self")
	// Held: a departed pod of an older image, one of this image, and one
	// whose address another pod publishes again.
	v.Held = []Held{{Addr: netip.MustParseAddr("192.0.2.14")}, {Addr: netip.MustParseAddr("192.0.2.15"), Adverts: Adverts{3, 200 * time.Millisecond}},
		{Addr: netip.MustParseAddr("192.0.2.11")}}
	if diff := cmp.Diff(addrs("192.0.2.12", "192.0.2.13"), v.VRRPv2(Adverts{2, time.Second}), cmpAddrs); diff != "" {
		t.Errorf("VRRPv2, old pods at VRRPv2 (-want +got):\n%s", diff)
	}
	for _, h := range v.Held {
		if got, want := h.Speaks(Adverts{2, time.Second}).Version, map[string]int{"192.0.2.14": 2, "192.0.2.15": 3, "192.0.2.11": 2}[h.Addr.String()]; got != want {
			t.Errorf("held %s speaks VRRPv%d, want %d", h.Addr, got, want)
		}
	}
	if got := v.VRRPv2(Adverts{3, 500 * time.Millisecond}); len(got) != 0 {
		t.Errorf("VRRPv2, old pods at VRRPv3: %v, want none", got)
	}
	if diff := cmp.Diff([]string{"e", "f"}, v.Unpublished()); diff != "" {
		t.Errorf("Unpublished (-want +got):\n%s", diff)
	}
}

// A pod publishes what it speaks beside its address, and without it
// (Options.Adverts zero) removes what it had.
func TestPublishAdverts(t *testing.T) {
	for _, tt := range []struct {
		name    string
		adverts Adverts
		want    map[string]string
	}{
		{"VRRPv3", Adverts{3, 200 * time.Millisecond}, map[string]string{Annotation: "192.0.2.10", FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 0.2s"}},
		{"nothing said", Adverts{}, map[string]string{Annotation: "192.0.2.10"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			self := annotated("self", workload("new"), "192.0.2.10", map[string]string{FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 1s"})
			client := newClient(self)
			var log syncbuf.Buffer
			w := New(Options{Client: client, Namespace: ns, Pod: "self", Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond, Hold: testHold, Adverts: tt.adverts})
			start(t, client, w, &log, addrs("192.0.2.10"))
			got, err := client.Resource(pods).Namespace(ns).Get(context.Background(), "self", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.Annotations); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
		})
	}
}

// While the API server does not answer, a departed peer's hold does not
// end: nothing in the view changes by itself. It ends once the API server
// answers again.
func TestHoldOutlastsAnOutage(t *testing.T) {
	client := newClient(pod("self", workload("x"), ""), pod("b", workload("x"), "192.0.2.12"))
	var down atomic.Bool
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	watches := make(chan *watch.FakeWatcher, 100)
	watchStarted.Delete(client) // its watches are this test's
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, refused
		}
		fw := watch.NewFakeWithChanSize(10, false)
		watches <- fw
		return true, fw, nil
	})
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	var log syncbuf.Buffer
	const hold = time.Second
	w := New(Options{Client: client, Namespace: ns, Pod: "self", Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond, Hold: hold})
	start(t, client, w, &log, addrs("192.0.2.11"))
	running := <-watches
	// The watch gets older than a second: the reflector reports a shorter
	// one that ends as a failure by itself.
	time.Sleep(1100 * time.Millisecond)
	// b goes: its address is held.
	b := pod("b", workload("x"), "192.0.2.12")
	if err := client.Tracker().Delete(pods, ns, "b"); err != nil {
		t.Fatal(err)
	}
	running.Delete(b)
	waitView(t, w, "holds b's address", func(v View) bool { return len(v.Held) == 1 && len(v.Members) == 1 })

	// The API server goes away before the hold ends.
	down.Store(true)
	running.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for w.Health().Up {
		if time.Now().After(deadline) {
			t.Fatalf("health never went down\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Well past the hold's end, the address is still held.
	time.Sleep(hold)
	if v := w.View(); len(v.Held) != 1 {
		t.Fatalf("the hold ended while the API server was away: %+v", v)
	}
	down.Store(false)
	waitView(t, w, "lets b's address go once the API server answers", func(v View) bool { return len(v.Held) == 0 })
}

// No decision reads another machine's clock: the API server's timestamps
// on the pods (created, deleting) 2 s ahead of this machine's, or 2 s
// behind, make the same view, so the same peers, the same VRRP versions
// and the same bridge, as timestamps that agree with it.
func TestAnotherMachinesClock(t *testing.T) {
	now := time.Now()
	fleet := func(off time.Duration) View {
		fast := map[string]string{FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 0.2s"}
		pinned := map[string]string{FastAnnotation: FastValue, AdvertsAnnotation: "vrrp3 0.5s"}
		ps := []*metav1.PartialObjectMetadata{
			annotated("self", workload("new"), "192.0.2.10", fast),
			annotated("a", workload("new"), "192.0.2.11", pinned),
			pod("b", workload("old"), "192.0.2.12"),
			pod("c", workload("new"), ""),
			annotated("d", workload("old"), "192.0.2.14", fast),
		}
		for i, p := range ps {
			// Created a minute apart, the last just now by the API
			// server's clock, which is off from this machine's by off.
			p.CreationTimestamp = metav1.NewTime(now.Add(off - time.Duration(len(ps)-1-i)*time.Minute))
		}
		// d is going: its grace period ends 30 s from now, as the API
		// server counts.
		deleting := metav1.NewTime(now.Add(off + 30*time.Second))
		ps[4].DeletionTimestamp = &deleting
		return viewOf(ps, "self")
	}
	want := fleet(0)
	for _, off := range []time.Duration{2 * time.Second, -2 * time.Second} {
		got := fleet(off)
		if !got.Equal(want) {
			t.Errorf("the API server's clock %s off: view %+v, want %+v", off, got, want)
		}
		for _, old := range []Adverts{{2, time.Second}, {3, 200 * time.Millisecond}} {
			if diff := cmp.Diff(want.VRRPv2(old), got.VRRPv2(old), cmpAddrs); diff != "" {
				t.Errorf("the API server's clock %s off: VRRPv2(%v) (-want +got):\n%s", off, old, diff)
			}
		}
		if diff := cmp.Diff(want.Peers(), got.Peers(), cmpAddrs); diff != "" {
			t.Errorf("the API server's clock %s off: peers (-want +got):\n%s", off, diff)
		}
		if diff := cmp.Diff(want.Unpublished(), got.Unpublished()); diff != "" {
			t.Errorf("the API server's clock %s off: unpublished (-want +got):\n%s", off, diff)
		}
	}
}
