package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipfailover/ipfailover/config"
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

// TestAdvertsLine: `ipfailover peers` ends with the fleet's adverts and
// why, and says when the fast interval grew with the number of instances.
func TestAdvertsLine(t *testing.T) {
	for _, tt := range []struct {
		name, vips, interval string
		view                 membership.View
		want                 string
	}{
		{"fast", "192.0.2.1-4", "", membership.View{},
			"adverts: every 0.2 s, VRRPv3 for IPv4 (fast: every pod of the workload speaks them)"},
		{"fast, bounded rate", "192.0.2.1-254", "", membership.View{},
			"adverts: every 0.26 s, VRRPv3 for IPv4 (fast: every pod of the workload speaks them; 254 VRRP instances, at most 1000 adverts a second)"},
		{"slow", "192.0.2.1-254", "", membership.View{Slow: []membership.Slow{{Pod: "old", Why: "publishes no fast adverts"}}},
			"adverts: every 1 s, VRRPv2 for IPv4 (slow: old publishes no fast adverts)"},
		{"explicit", "192.0.2.1-254", "0.2", membership.View{},
			"adverts: every 0.2 s, VRRPv3 for IPv4 (OPENSHIFT_HA_ADVERT_INTERVAL)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse(config.Raw{PeersFrom: "pods", PodName: "p", VirtualIPs: tt.vips, Offset: "0", AdvertInterval: tt.interval})
			if err != nil {
				t.Fatal(err)
			}
			if got := advertsLine(cfg, tt.view); got != tt.want {
				t.Errorf("advertsLine:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
