package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// FuzzParseVIPs: never panics, and what it accepts formats back to a list
// that parses to the same addresses.
func FuzzParseVIPs(f *testing.F) {
	for _, s := range []string{
		"192.0.2.1", "10.1.1.100-102", "1.1.1.1, 2.2.2.2,3.3.3.3-4  4.4.4.4", "2001:db8::1f39-1F3B",
		"192.0.2.10-192.0.2.12", "2001:db8::a-2001:db8::c", "10.1.1.102-100", "1.2.3.4/24", "::", "-", ",,",
		"192.0.2.1-2-3", "fe80::1%eth0-2", "::ffff:1.2.3.4",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		vips, err := ParseVIPs(s)
		if err != nil {
			if strings.Contains(err.Error(), "\x00") && !strings.Contains(s, "\x00") {
				t.Fatalf("error invents bytes: %v", err)
			}
			return
		}
		var parts []string
		for _, v := range vips {
			if !v.IsValid() || v.Zone() != "" {
				t.Fatalf("accepted %v from %q", v, s)
			}
			parts = append(parts, v.String())
		}
		again, err := ParseVIPs(strings.Join(parts, ","))
		if err != nil {
			t.Fatalf("round trip of %q: %v", s, err)
		}
		if !slices.EqualFunc(vips, again, func(a, b netip.Addr) bool { return a == b }) {
			t.Fatalf("round trip of %q: %v then %v", s, vips, again)
		}
	})
}

// FuzzParse: any environment either parses, with every priority in
// 1..254 and every router id in 1..255, or is refused; never a panic.
func FuzzParse(f *testing.F) {
	f.Add("OpenShift-IPFailover", "192.0.2.1-3", "0", "80", "10", "", "2", "", "preempt_delay 300", "")
	f.Add("x", "192.0.2.1,2001:db8::1", "1", "0", "0", "1 2", "3", "192.0.2.11,2001:db8::11", "nopreempt", "0.5")
	f.Add("a\nb", "1.1.1.1-300", "-1", "x", "255", "0", "0", "nope", "preempt_delay", "0")
	f.Fuzz(func(t *testing.T, name, vips, groups, port, offset, excluded, replicas, peers, preempt, advert string) {
		c, err := Parse(Raw{ConfigName: name, VirtualIPs: vips, VIPGroups: groups, MonitorPort: port, Offset: offset,
			Excluded: excluded, ReplicaCount: replicas, UnicastPeers: peers, Preemption: preempt, AdvertInterval: advert})
		if err != nil {
			return
		}
		for _, g := range c.Groups {
			if g.RouterID == 0 {
				t.Fatalf("router id 0 in %+v", g)
			}
		}
		ins, err := c.Instances(Node{Interface: "eth0", Addr4: netip.MustParseAddr("192.0.2.11"), Addr6: netip.MustParseAddr("2001:db8::11")})
		if err != nil {
			return
		}
		for _, in := range ins {
			if in.Priority < 1 || in.Priority > 254 {
				t.Fatalf("%s: priority %d", in.Name, in.Priority)
			}
			if in.Master && c.Preemption.Never {
				t.Fatalf("%s: MASTER with nopreempt", in.Name)
			}
		}
	})
}
