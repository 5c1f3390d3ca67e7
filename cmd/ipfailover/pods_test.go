package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// TestHeldAddrs: `ipfailover peers` names the addresses keepalived.conf
// lists that no pod of the workload has (held after they left), not the
// members' nor the stand-in of a pod alone.
func TestHeldAddrs(t *testing.T) {
	a := netip.MustParseAddr
	view := membership.View{Members: []membership.Member{
		{Pod: "self", Addrs: []netip.Addr{a("192.0.2.11")}, Self: true, In: true},
		{Pod: "b", Addrs: []netip.Addr{a("192.0.2.12"), a("2001:db8::12")}, In: true},
	}}
	listed := map[netip.Addr]bool{a("192.0.2.12"): true, a("2001:db8::12"): true, a("192.0.2.13"): true, a("2001:db8::13"): true, a("0.0.0.0"): true}
	if got, want := fmt.Sprint(heldAddrs(view, listed)), "[192.0.2.13 2001:db8::13]"; got != want {
		t.Errorf("held %s, want %s", got, want)
	}
	if got := heldAddrs(view, map[netip.Addr]bool{a("192.0.2.12"): true}); len(got) != 0 {
		t.Errorf("held %v, want none", got)
	}
}

// TestAdvertsLine: `ipfailover peers` ends with the adverts keepalived
// speaks and why, and says when the fast interval grew with the number of
// instances.
func TestAdvertsLine(t *testing.T) {
	for _, tt := range []struct {
		name, vips, interval, from string
		want                       string
	}{
		{"fast", "192.0.2.1-4", "", "pods",
			"adverts: every 0.2 s, VRRPv3 for IPv4 (the fast interval of the peers from the pods)"},
		{"fast, bounded rate", "192.0.2.1-254", "", "pods",
			"adverts: every 0.26 s, VRRPv3 for IPv4 (the fast interval of the peers from the pods; 254 VRRP instances, at most 1000 adverts a second)"},
		{"explicit", "192.0.2.1-254", "1", "pods",
			"adverts: every 1 s, VRRPv3 for IPv4 (OPENSHIFT_HA_ADVERT_INTERVAL; VRRPv3, as every pod that follows the pods)"},
		{"multicast", "192.0.2.1-4", "", "",
			"adverts: every 1 s, VRRPv2 for IPv4 (the default without the peers from the pods: what the shipped image speaks)"},
		{"multicast, explicit", "192.0.2.1-4", "0.5", "",
			"adverts: every 0.5 s, VRRPv3 for IPv4 (OPENSHIFT_HA_ADVERT_INTERVAL)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse(config.Raw{PeersFrom: tt.from, PodName: "p", VirtualIPs: tt.vips, Offset: "0", AdvertInterval: tt.interval})
			if err != nil {
				t.Fatal(err)
			}
			if got := advertsLine(cfg); got != tt.want {
				t.Errorf("advertsLine:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestFleetOf: keepalived's peers are the pods that speak VRRPv3; a pod of
// an older image (its address alone) speaks VRRPv2 at these settings'
// whole seconds and is bridged instead, and the held address of one that
// went is nothing; what the wire says overrides what a pod publishes; a
// pod of this pod's template that publishes nothing yet is no multicast
// node.
func TestFleetOf(t *testing.T) {
	a := netip.MustParseAddr
	v3 := membership.Adverts{Version: 3, Interval: 200 * time.Millisecond}
	view := membership.View{Members: []membership.Member{
		{Pod: "self", Addrs: []netip.Addr{a("192.0.2.11")}, Self: true, In: true, Adverts: v3, Revision: "new"},
		{Pod: "new", Addrs: []netip.Addr{a("192.0.2.12"), a("2001:db8::12")}, In: true, Adverts: v3, Revision: "new"},
		{Pod: "old", Addrs: []netip.Addr{a("192.0.2.13"), a("2001:db8::13")}, In: true, Revision: "old"},
		{Pod: "starting", Revision: "new"},
		{Pod: "shipped", Revision: "shipped"},
	}, Held: []membership.Held{{Addr: a("192.0.2.14"), Pod: "gone", Adverts: v3}, {Addr: a("192.0.2.15"), Pod: "gone-old"}}}
	for _, tt := range []struct {
		name     string
		interval string
		heard    map[netip.Addr]int
		want     plan.Fleet
	}{
		{"an older image at VRRPv2", "", nil, plan.Fleet{
			Members: []netip.Addr{a("192.0.2.12"), a("192.0.2.14"), a("2001:db8::12"), a("2001:db8::13")},
			VRRPv2:  []netip.Addr{a("192.0.2.13")}, Unpublished: []string{"shipped"}}},
		{"an older image at VRRPv3 (a fraction)", "0.5", nil, plan.Fleet{
			Members:     []netip.Addr{a("192.0.2.12"), a("192.0.2.13"), a("192.0.2.14"), a("192.0.2.15"), a("2001:db8::12"), a("2001:db8::13")},
			Unpublished: []string{"shipped"}}},
		{"the older image heard at VRRPv3, a new one at VRRPv2", "", map[netip.Addr]int{a("192.0.2.13"): 3, a("192.0.2.12"): 2}, plan.Fleet{
			Members: []netip.Addr{a("192.0.2.13"), a("192.0.2.14"), a("2001:db8::12"), a("2001:db8::13")},
			VRRPv2:  []netip.Addr{a("192.0.2.12")}, Unpublished: []string{"shipped"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse(config.Raw{PeersFrom: "pods", PodName: "p", VirtualIPs: "192.0.2.100", AdvertInterval: tt.interval})
			if err != nil {
				t.Fatal(err)
			}
			got := fleetOf(cfg, view, tt.heard)
			if !got.Equal(tt.want) {
				t.Errorf("fleetOf:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestHeardIsThePods: what the guard heard from an address overrides what
// the pod publishing it says, until another pod publishes the address (a
// pod of another image on the same node, host network).
func TestHeardIsThePods(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod := func(name, hash string, annotations map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ipfailover", Name: name, Annotations: annotations,
				Labels: map[string]string{"app": "ipfailover", "pod-template-hash": hash}},
		}
	}
	older := map[string]string{membership.Annotation: "192.0.2.12"}
	client := metadatafake.NewSimpleMetadataClient(scheme, pod("self", "new", nil), pod("old-a", "old", older))
	// The fake delivers a change only to the watches open when it is made:
	// the test changes pods once the informer watches them.
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		wi, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		once.Do(func() { close(watching) })
		return true, wi, err
	})
	cfg, err := config.Parse(config.Raw{PeersFrom: "pods", PodName: "self", VirtualIPs: "192.0.2.100"})
	if err != nil {
		t.Fatal(err)
	}
	w := membership.New(membership.Options{Client: client, Namespace: "ipfailover", Pod: "self", Adverts: speaks(cfg), Retry: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	if err := w.Prepare(ctx, []netip.Addr{netip.MustParseAddr("192.0.2.11")}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("membership: %v", err)
		}
	}()
	if err := w.Synced(ctx); err != nil {
		t.Fatal(err)
	}
	<-watching
	pp := &podPeers{w: w, cfg: cfg, heardChanged: make(chan struct{}, 1), heard: map[netip.Addr]heardPod{}}
	fleetIs := func(what, vrrp2 string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			f, _ := pp.fleet()
			if fmt.Sprint(f.VRRPv2) == vrrp2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: VRRPv2 pods %v, want %s", what, f.VRRPv2, vrrp2)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fleetIs("an older pod", "[192.0.2.12]")
	pp.Heard(netip.MustParseAddr("192.0.2.12"), 3)
	fleetIs("the older pod heard speaking VRRPv3", "[]")
	// Another older pod on the same node: what was heard is not its.
	if err := client.Tracker().Delete(podsResource, "ipfailover", "old-a"); err != nil {
		t.Fatal(err)
	}
	if err := client.Tracker().Add(pod("old-b", "old", older)); err != nil {
		t.Fatal(err)
	}
	fleetIs("another older pod with the address", "[192.0.2.12]")
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
