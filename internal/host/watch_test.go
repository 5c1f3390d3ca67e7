package host_test

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// TestWatchAddrs subscribes in a namespace of its own (which proves the
// subscription lives there, not in the test's namespace): a value at once,
// one after a VIP lands on the watched interface and one after it goes,
// none for an address on another interface, and WatchAddrs returns when the
// context ends.
func TestWatchAddrs(t *testing.T) {
	n := newNS(t)
	n.veth(t, "ipf0", "ipf0p", true)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- n.nl.WatchAddrs(ctx, "ipf0", ch) }()
	next := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case err := <-done:
			t.Fatalf("%s: WatchAddrs returned %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no value", what)
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case <-ch:
			t.Fatalf("%s: a value, want none", what)
		case <-time.After(300 * time.Millisecond):
		}
	}
	next("start")
	quiet("nothing changed")

	n.addr(t, "ipf0p", "192.0.2.9/32", nil)
	quiet("an address on another interface")

	n.addr(t, "ipf0", "192.0.2.100/32", nil)
	next("VIP added")
	if err := n.nl.Delete("ipf0", netip.MustParsePrefix("192.0.2.100/32")); err != nil {
		t.Fatal(err)
	}
	next("VIP deleted")

	// Every interface: the other one's address too.
	all := make(chan struct{}, 1)
	allDone := make(chan error, 1)
	go func() { allDone <- n.nl.WatchAddrs(ctx, "", all) }()
	<-all
	n.addr(t, "ipf0p", "192.0.2.10/32", nil)
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("an address on another interface: no value when watching every interface")
	}

	if err := n.nl.WatchAddrs(ctx, "nosuch0", make(chan struct{}, 1)); err == nil {
		t.Error("WatchAddrs of a missing interface: no error")
	}
	cancel()
	for _, d := range []chan error{done, allDone} {
		select {
		case err := <-d:
			if err != nil {
				t.Errorf("WatchAddrs returned %v after the context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WatchAddrs did not return after the context ended")
		}
	}
}
