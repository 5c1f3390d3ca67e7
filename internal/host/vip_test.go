package host_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/host/hosttest"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var cmpAddrs = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })
var cmpPrefixes = cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })

func TestReleaseVIPs(t *testing.T) {
	node := prefixes("192.0.2.2/24", "2001:db8::2/64", "fe80::1/64")
	tests := []struct {
		name        string
		on          []netip.Prefix // besides the node's own addresses
		vips        []netip.Addr
		wantRemoved []netip.Prefix
	}{
		{
			name:        "keepalived's /32 and /128",
			on:          prefixes("192.0.2.10/32", "2001:db8::10/128"),
			vips:        addrs("192.0.2.10", "2001:db8::10"),
			wantRemoved: prefixes("192.0.2.10/32", "2001:db8::10/128"),
		},
		{
			name:        "added by hand as /24 and /64",
			on:          prefixes("192.0.2.10/24", "2001:db8::10/64"),
			vips:        addrs("192.0.2.10", "2001:db8::10"),
			wantRemoved: prefixes("192.0.2.10/24", "2001:db8::10/64"),
		},
		{
			name:        "one IPv4 VIP with two prefix lengths",
			on:          prefixes("192.0.2.10/32", "192.0.2.10/24"),
			vips:        addrs("192.0.2.10"),
			wantRemoved: prefixes("192.0.2.10/32", "192.0.2.10/24"),
		},
		{
			name:        "VIPs not present",
			vips:        addrs("192.0.2.10", "2001:db8::10"),
			wantRemoved: nil,
		},
		{
			name:        "other addresses stay",
			on:          prefixes("192.0.2.10/32", "192.0.2.11/32", "2001:db8::11/128"),
			vips:        addrs("192.0.2.10", "192.0.2.99"),
			wantRemoved: prefixes("192.0.2.10/32"),
		},
		{
			name:        "no VIPs configured",
			on:          prefixes("192.0.2.10/32"),
			wantRemoved: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := hosttest.New(map[string][]netip.Prefix{"eth0": append(append([]netip.Prefix{}, node...), tt.on...)})

			removed, err := host.ReleaseVIPs(a, "eth0", tt.vips)
			if err != nil {
				t.Fatalf("ReleaseVIPs: %v", err)
			}
			if diff := cmp.Diff(tt.wantRemoved, removed, cmpPrefixes); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
			left, err := a.List("eth0")
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range left {
				for _, v := range tt.vips {
					if p.Addr() == v {
						t.Errorf("VIP %s still on eth0 as %s", v, p)
					}
				}
			}

			again, err := host.ReleaseVIPs(a, "eth0", tt.vips)
			if err != nil || len(again) != 0 {
				t.Errorf("second ReleaseVIPs = %v, %v; want nothing removed, no error", again, err)
			}
		})
	}
}

func TestReleaseVIPsJoinsErrors(t *testing.T) {
	a := hosttest.New(map[string][]netip.Prefix{
		"eth0": prefixes("192.0.2.2/24", "192.0.2.10/32", "192.0.2.11/32", "192.0.2.12/32"),
	})
	errBusy := errors.New("device busy")
	errPerm := errors.New("operation not permitted")
	a.FailDelete(netip.MustParsePrefix("192.0.2.10/32"), errBusy)
	a.FailDelete(netip.MustParsePrefix("192.0.2.12/32"), errPerm)

	removed, err := host.ReleaseVIPs(a, "eth0", addrs("192.0.2.10", "192.0.2.11", "192.0.2.12"))
	if !errors.Is(err, errBusy) || !errors.Is(err, errPerm) {
		t.Errorf("error = %v; want both deletion failures", err)
	}
	for _, p := range []string{"192.0.2.10/32", "192.0.2.12/32"} {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %s", err, p)
		}
	}
	if diff := cmp.Diff(prefixes("192.0.2.11/32"), removed, cmpPrefixes); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

func TestReleaseVIPsMissingInterface(t *testing.T) {
	a := hosttest.New(map[string][]netip.Prefix{"eth0": nil, "lo": nil})
	_, err := host.ReleaseVIPs(a, "eth9", addrs("192.0.2.10"))
	var nsi *host.NoSuchInterfaceError
	if !errors.As(err, &nsi) {
		t.Fatalf("error = %v; want a *host.NoSuchInterfaceError", err)
	}
	if diff := cmp.Diff([]string{"eth0", "lo"}, nsi.Have); diff != "" {
		t.Errorf("Have (-want +got):\n%s", diff)
	}
	if got, want := nsi.Error(), "no such interface on this host (have: eth0, lo)"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

func TestHeldVIPs(t *testing.T) {
	a := hosttest.New(map[string][]netip.Prefix{
		"eth0": prefixes("192.0.2.2/24", "192.0.2.12/32", "2001:db8::10/64", "192.0.2.10/24", "fe80::1/64"),
	})
	tests := []struct {
		name string
		vips []netip.Addr
		want []netip.Addr
	}{
		{name: "in configured order", vips: addrs("192.0.2.10", "192.0.2.11", "2001:db8::10", "192.0.2.12"), want: addrs("192.0.2.10", "2001:db8::10", "192.0.2.12")},
		{name: "none held", vips: addrs("198.51.100.1"), want: nil},
		{name: "none configured", vips: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := host.HeldVIPs(a, "eth0", tt.vips)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpAddrs); diff != "" {
				t.Errorf("HeldVIPs (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := host.HeldVIPs(a, "eth9", addrs("192.0.2.10")); err == nil {
		t.Error("HeldVIPs on a missing interface: no error")
	}
}

// TestFakeAddrs pins the kernel behaviour the fake copies, which the netlink
// tests check against the real kernel.
func TestFakeAddrs(t *testing.T) {
	a := hosttest.New(map[string][]netip.Prefix{"eth0": nil})
	checkAddrsSemantics(t, a, "eth0")
}

// checkAddrsSemantics runs the same sequence on any host.Addrs.
func checkAddrsSemantics(t *testing.T, a host.Addrs, iface string) {
	t.Helper()
	steps := []struct {
		op      string
		prefix  string
		wantErr error
	}{
		{"add", "192.0.2.10/32", nil},
		{"add", "192.0.2.10/32", host.ErrAddrExists},
		{"add", "192.0.2.10/24", nil}, // IPv4: the same address with another length is a second address
		{"add", "2001:db8::10/128", nil},
		{"add", "2001:db8::10/64", host.ErrAddrExists}, // IPv6: not so
		{"delete", "192.0.2.10/24", nil},
		{"delete", "192.0.2.10/24", host.ErrAddrNotFound},
		{"delete", "2001:db8::10/64", host.ErrAddrNotFound}, // only as listed
		{"delete", "2001:db8::10/128", nil},
	}
	for _, s := range steps {
		p := netip.MustParsePrefix(s.prefix)
		var err error
		if s.op == "add" {
			err = a.Add(iface, p)
		} else {
			err = a.Delete(iface, p)
		}
		if (s.wantErr == nil && err != nil) || (s.wantErr != nil && !errors.Is(err, s.wantErr)) {
			t.Errorf("%s %s: error %v, want %v", s.op, p, err, s.wantErr)
		}
	}
	got, err := a.List(iface)
	if err != nil {
		t.Fatal(err)
	}
	var vips []netip.Prefix
	for _, p := range got {
		if p.Addr().IsGlobalUnicast() {
			vips = append(vips, p)
		}
	}
	if diff := cmp.Diff(prefixes("192.0.2.10/32"), vips, cmpPrefixes); diff != "" {
		t.Errorf("left on %s (-want +got):\n%s", iface, diff)
	}
	var nsi *host.NoSuchInterfaceError
	if err := a.Add("nonexistent0", netip.MustParsePrefix("192.0.2.1/32")); !errors.As(err, &nsi) {
		t.Errorf("Add on a missing interface: error %v, want a *host.NoSuchInterfaceError", err)
	}
	if err := a.Delete("nonexistent0", netip.MustParsePrefix("192.0.2.1/32")); !errors.As(err, &nsi) {
		t.Errorf("Delete on a missing interface: error %v, want a *host.NoSuchInterfaceError", err)
	}
	if _, err := a.List("nonexistent0"); !errors.As(err, &nsi) {
		t.Errorf("List on a missing interface: error %v, want a *host.NoSuchInterfaceError", err)
	}
}
