package keepalived

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	text, err := os.ReadFile("testdata/parse/node2.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	want := &Conf{
		AdvertInt:     time.Second,
		CheckInterval: 2 * time.Second,
		Instances: []ConfInstance{
			{Name: "OpenShift_IPFailover_VIP_1", RouterID: 11, Priority: 249, Master: true, VIPs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}},
			{Name: "OpenShift_IPFailover_VIP_2", RouterID: 12, Priority: 253, Master: true, VIPs: []netip.Addr{netip.MustParseAddr("198.51.100.2")}},
			{Name: "OpenShift_IPFailover_VIP_3", RouterID: 13, Priority: 249, VIPs: []netip.Addr{netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("198.51.100.4")}},
		},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if in := got.Instance("OpenShift_IPFailover_VIP_2"); in == nil || in.Priority != 253 {
		t.Errorf("Instance(VIP_2) = %+v, want priority 253", in)
	}
	if in := got.InstanceOf(netip.MustParseAddr("198.51.100.4")); in == nil || in.RouterID != 13 {
		t.Errorf("InstanceOf(.4) = %+v, want router id 13", in)
	}
	if got.Instance("nope") != nil || got.InstanceOf(netip.MustParseAddr("198.51.100.9")) != nil {
		t.Error("an unknown instance or VIP was found")
	}
}

func TestParseV3(t *testing.T) {
	c, err := Parse([]byte("global_defs {\n   vrrp_version 3\n}\nvrrp_instance A {\n   priority 235\n   advert_int 0.1\n   virtual_ipaddress {\n      198.51.100.1 dev eth0\n   }\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.V3 || c.AdvertInt != 100*time.Millisecond {
		t.Fatalf("V3 %v AdvertInt %v, want true 100ms", c.V3, c.AdvertInt)
	}
	// VRRPv3 scales the skew by the advert interval: 21/256 of 0.1 s.
	if got, want := c.Skew(235), 8203125*time.Nanosecond; got != want {
		t.Errorf("Skew(235) = %v, want %v", got, want)
	}
	if got, want := c.MasterDown(235), 308203125*time.Nanosecond; got != want {
		t.Errorf("MasterDown(235) = %v, want %v", got, want)
	}
}

// TestParseUnicastPeers: the peers of a rendered pod-mode configuration,
// the comments among them skipped.
func TestParseUnicastPeers(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{"testdata/peers-from-pods.conf.golden", "[192.0.2.11 192.0.2.13]"},
		{"testdata/peers-from-pods-alone.conf.golden", "[0.0.0.0]"},
		{"testdata/default.conf.golden", "[]"},
	} {
		text, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(c.Instances[0].UnicastPeers); got != tt.want {
			t.Errorf("%s: peers %s, want %s", tt.file, got, tt.want)
		}
	}
	if _, err := Parse([]byte("vrrp_instance A {\n unicast_peer {\n  node2\n }\n}\n")); err == nil {
		t.Error("a peer that is not an address: no error")
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"empty", ""},
		{"no instance", "global_defs {\n}\n"},
		{"bad priority", "vrrp_instance A {\n priority high\n}\n"},
		{"bad vip", "vrrp_instance A {\n virtual_ipaddress {\n  not-an-ip dev eth0\n }\n}\n"},
		{"bad advert", "vrrp_instance A {\n advert_int -1\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.text)); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestSkewV2(t *testing.T) {
	c := &Conf{AdvertInt: time.Second}
	for _, tc := range []struct {
		prio int
		want time.Duration
	}{
		{254, 7812500 * time.Nanosecond},
		{235, 82031250 * time.Nanosecond},
		{1, 996093750 * time.Nanosecond},
	} {
		if got := c.Skew(tc.prio); got != tc.want {
			t.Errorf("Skew(%d) = %v, want %v", tc.prio, got, tc.want)
		}
	}
	if got, want := c.MasterDown(254), 3*time.Second+7812500*time.Nanosecond; got != want {
		t.Errorf("MasterDown(254) = %v, want %v", got, want)
	}
}
