package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/internal/splitbrain"
)

// nopRecorder is a check.Recorder that keeps nothing.
type nopRecorder struct{}

func (nopRecorder) Probed(time.Duration, error) {}
func (nopRecorder) Passing(bool)                {}

// TestEventNotes: what each component tells becomes one Event a person
// reads: which node took which VIPs, from which node (its pod), why and
// how fast; releases; a split brain and its end; the check; keepalived's
// deaths. Written to a real HTTP server as the API server.
func TestEventNotes(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ Type, Reason, Note string }
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
		}
		mu.Lock()
		got = append(got, ev.Type+" "+ev.Reason+": "+ev.Note)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	client, err := membership.NewEventsClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ev := membership.NewEvents(membership.EventsOptions{Client: client, Namespace: "ipfailover", Pod: "ipfailover-a", Instance: "node1"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ev.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	o := &operatorEvents{ev: ev, node: "node1"}
	peer := netip.MustParseAddr("10.0.0.2")
	o.podOf = func(a netip.Addr) string {
		if a == peer {
			return "ipfailover-b"
		}
		return ""
	}
	vips := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")}
	at := time.Now()
	o.took(splitbrain.Takeover{Instance: "VIP_1", VIPs: vips, At: at, Cause: splitbrain.CauseSilent, From: peer,
		LastAdvert: at.Add(-610 * time.Millisecond), Announced: at.Add(5 * time.Millisecond)})
	o.released(splitbrain.Release{Instance: "VIP_1", VIPs: vips, At: at, Cause: splitbrain.ReleaseHigherPriority, To: netip.MustParseAddr("10.0.0.3")})
	mac, _ := net.ParseMAC("02:00:00:00:00:0b")
	o.duplicated(splitbrain.Duplicate{VIP: vips[0], Instance: "VIP_1", Others: []net.HardwareAddr{mac}, Started: true})
	o.duplicated(splitbrain.Duplicate{VIP: vips[0], Instance: "VIP_1", Others: []net.HardwareAddr{mac}, Lasted: 1500 * time.Millisecond})
	o.died("signal: killed", time.Minute, time.Second)
	c := &checkEvents{Recorder: nopRecorder{}, o: o, target: func() string { return "10.0.0.1:80" }}
	c.Passing(true) // the first pass, at the start, is not news
	c.Probed(time.Millisecond, errors.New("connection refused"))
	c.Passing(false)
	c.Passing(true)
	want := []string{
		"Normal VIPTaken: node1 took 192.0.2.10, 192.0.2.11 (VIP_1) from 10.0.0.2 (pod ipfailover-b): its adverts stopped (a dead, frozen or cut-off node); MASTER 0.61 s after its last advert, announced at 0.61 s",
		"Normal VIPReleased: node1 released 192.0.2.10, 192.0.2.11 (VIP_1): 10.0.0.3, which has a higher priority, holds them (preemption, or the end of a split brain)",
		"Warning SplitBrain: another host (MAC 02:00:00:00:00:0b) answers for 192.0.2.10 (VIP_1), which node1 holds: clients split between them",
		"Normal SplitBrainHealed: no other host answers for 192.0.2.10 now; node1 holds it alone, after 1.50 s of both",
		"Warning KeepalivedRestarted: keepalived died (signal: killed) after 1m0s; restarting it in 1s",
		"Warning CheckFailing: the check of 10.0.0.1:80 (OPENSHIFT_HA_MONITOR_PORT) fails: connection refused; node1 gives its VIPs up",
		"Normal CheckPassing: the check of 10.0.0.1:80 (OPENSHIFT_HA_MONITOR_PORT) passes: node1 may hold VIPs again",
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var none *operatorEvents
	none.took(splitbrain.Takeover{})
	none.died("", 0, 0)
}
