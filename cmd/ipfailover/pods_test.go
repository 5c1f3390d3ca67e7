package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipfailover/ipfailover/internal/membership"
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
