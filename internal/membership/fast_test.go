package membership

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipfailover/ipfailover/test/syncbuf"
)

// fastPod is pod with FastAnnotation, created at created.
func fastPod(name string, labels map[string]string, annotation string, fast bool, created time.Time) *metav1.PartialObjectMetadata {
	p := pod(name, labels, annotation)
	if fast {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[FastAnnotation] = FastValue
	}
	p.CreationTimestamp = metav1.Time{Time: created}
	return p
}

// Each kind of pod holds the fleet at the slow adverts, or not.
func TestFleetSlow(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	self := fastPod("self", workload("new"), "192.0.2.10", true, old)
	for _, tt := range []struct {
		name    string
		other   *metav1.PartialObjectMetadata
		slow    string // the reason's start, "" for none
		recheck time.Time
	}{
		{"fast", fastPod("p", workload("new"), "192.0.2.11", true, old), "", time.Time{}},
		{"fast, another revision", fastPod("p", workload("newer"), "192.0.2.11", true, old), "", time.Time{}},
		{"an older image", fastPod("p", workload("old"), "192.0.2.11", false, old), "publishes its unicast address without", time.Time{}},
		{"an older image, terminating", func() *metav1.PartialObjectMetadata {
			p := fastPod("p", workload("old"), "192.0.2.11", false, old)
			p.DeletionTimestamp = &metav1.Time{Time: now}
			return p
		}(), "publishes its unicast address without", time.Time{}},
		{"starting, this revision", fastPod("p", workload("new"), "", false, old), "", time.Time{}},
		{"starting, another revision", fastPod("p", workload("newer"), "", false, now.Add(-time.Second)), "", now.Add(-time.Second + FastGrace)},
		{"multicast, another revision", fastPod("p", workload("old"), "", false, now.Add(-FastGrace)), "publishes nothing", time.Time{}},
		{"no revision labels", fastPod("p", map[string]string{"app": "ipfailover"}, "", false, old), "publishes nothing", time.Time{}},
		{"a bad address", fastPod("p", workload("old"), "192.0.2.300", false, old), "publishes nothing", time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := viewOf([]*metav1.PartialObjectMetadata{self, tt.other}, "self")
			slow, recheck := fleetSlow(v, now)
			switch {
			case tt.slow == "" && len(slow) > 0:
				t.Errorf("slow %+v, want none", slow)
			case tt.slow != "" && (len(slow) != 1 || slow[0].Pod != "p" || !startsWith(slow[0].Why, tt.slow)):
				t.Errorf("slow %+v, want p: %s...", slow, tt.slow)
			}
			if !recheck.Equal(tt.recheck) {
				t.Errorf("recheck %v, want %v", recheck, tt.recheck)
			}
		})
	}
	// This pod alone does not hold anything.
	if slow, _ := fleetSlow(viewOf([]*metav1.PartialObjectMetadata{fastPod("self", workload("old"), "192.0.2.10", false, old)}, "self"), now); len(slow) > 0 {
		t.Errorf("self alone: slow %+v", slow)
	}
}

func startsWith(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// A pod of another revision that publishes nothing holds the fleet slow once
// its grace ends, by itself (no event from the API server), and releases it
// when it publishes the fast adverts.
func TestWatcherGraceEnds(t *testing.T) {
	self := fastPod("self", workload("new"), "", false, time.Now().Add(-time.Hour))
	client := newClient(self, fastPod("other", workload("old"), "192.0.2.11", true, time.Now().Add(-time.Hour)))
	var log syncbuf.Buffer
	w := New(Options{Client: client, Namespace: ns, Pod: "self", Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond, Hold: testHold, FastAdverts: true})
	start(t, client, w, &log, addrs("192.0.2.10"))
	got, err := client.Resource(pods).Namespace(ns).Get(context.Background(), "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[FastAnnotation] != FastValue || got.Annotations[Annotation] != "192.0.2.10" {
		t.Fatalf("published %v, want %s and %s=%s", got.Annotations, Annotation, FastAnnotation, FastValue)
	}
	waitView(t, w, "fast", func(v View) bool { return v.Fast() })

	created := time.Now()
	if err := client.Tracker().Add(fastPod("newer", workload("newer"), "", false, created)); err != nil {
		t.Fatal(err)
	}
	waitView(t, w, "the new pod listed, still fast", func(v View) bool { return len(v.Members) == 3 && v.Fast() })
	v := waitView(t, w, "slow once the grace ended", func(v View) bool { return !v.Fast() })
	if since := time.Since(created); since < FastGrace {
		t.Errorf("slow after %v, before the grace %v ended", since, FastGrace)
	}
	if diff := cmp.Diff([]string{"newer"}, slowPods(v)); diff != "" {
		t.Errorf("slow pods (-want +got):\n%s", diff)
	}
	if err := client.Tracker().Update(pods, fastPod("newer", workload("newer"), "192.0.2.12", true, created), ns); err != nil {
		t.Fatal(err)
	}
	waitView(t, w, "fast again", func(v View) bool { return v.Fast() })
}

func slowPods(v View) []string {
	var out []string
	for _, s := range v.Slow {
		out = append(out, s.Pod)
	}
	return out
}

// Without FastAdverts a pod publishes no FastAnnotation, and removes one
// it had.
func TestPublishWithoutFast(t *testing.T) {
	self := fastPod("self", workload("new"), "192.0.2.10", true, time.Now())
	client := newClient(self)
	var log syncbuf.Buffer
	w := New(Options{Client: client, Namespace: ns, Pod: "self", Logger: slog.New(slog.NewTextHandler(&log, nil)), Retry: 10 * time.Millisecond, Hold: testHold})
	start(t, client, w, &log, addrs("192.0.2.10"))
	got, err := client.Resource(pods).Namespace(ns).Get(context.Background(), "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[FastAnnotation]; ok || got.Annotations[Annotation] != "192.0.2.10" {
		t.Errorf("annotations %v, want %s alone", got.Annotations, Annotation)
	}
}
