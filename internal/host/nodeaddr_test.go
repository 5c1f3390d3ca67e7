package host

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPickNodeAddrs(t *testing.T) {
	global := func(p string, flags int) ifaceAddr {
		return ifaceAddr{prefix: netip.MustParsePrefix(p), flags: flags, scope: unix.RT_SCOPE_UNIVERSE}
	}
	link := func(p string) ifaceAddr {
		return ifaceAddr{prefix: netip.MustParsePrefix(p), scope: unix.RT_SCOPE_LINK}
	}
	tests := []struct {
		name           string
		addrs          []ifaceAddr
		vips           []string
		wantV4, wantV6 string // "" for the zero Addr
	}{
		{
			name:   "first of each family",
			addrs:  []ifaceAddr{global("192.0.2.2/24", 0), global("2001:db8::2/64", 0), global("192.0.2.3/24", 0), link("fe80::1/64")},
			wantV4: "192.0.2.2", wantV6: "2001:db8::2",
		},
		{
			name: "a held VIP listed first is not the node's address",
			addrs: []ifaceAddr{
				global("192.0.2.10/32", 0), global("192.0.2.2/24", 0),
				global("2001:db8::10/128", 0), global("2001:db8::2/64", 0),
			},
			vips:   []string{"192.0.2.10", "2001:db8::10"},
			wantV4: "192.0.2.2", wantV6: "2001:db8::2",
		},
		{
			name:   "a VIP added by hand with the subnet's length",
			addrs:  []ifaceAddr{global("192.0.2.10/24", 0), global("192.0.2.2/24", unix.IFA_F_SECONDARY)},
			vips:   []string{"192.0.2.10"},
			wantV4: "192.0.2.2",
		},
		{
			name:   "an IPv4 primary before a secondary",
			addrs:  []ifaceAddr{global("192.0.2.3/24", unix.IFA_F_SECONDARY), global("198.51.100.2/24", 0)},
			wantV4: "198.51.100.2",
		},
		{
			name: "link-local, loopback and host scope skipped",
			addrs: []ifaceAddr{
				link("169.254.1.1/16"), link("fe80::1/64"),
				{prefix: netip.MustParsePrefix("127.0.0.1/8"), scope: unix.RT_SCOPE_HOST},
				{prefix: netip.MustParsePrefix("::1/128"), scope: unix.RT_SCOPE_HOST},
			},
		},
		{
			name: "deprecated, tentative and failed IPv6 skipped",
			addrs: []ifaceAddr{
				global("2001:db8::5/64", unix.IFA_F_DEPRECATED),
				global("2001:db8::6/64", unix.IFA_F_TENTATIVE),
				global("2001:db8::7/64", unix.IFA_F_DADFAILED|unix.IFA_F_TENTATIVE),
				global("2001:db8::2/64", 0),
			},
			wantV6: "2001:db8::2",
		},
		{
			name:   "a stable IPv6 address before a temporary one",
			addrs:  []ifaceAddr{global("2001:db8::a:b:c:d/64", unix.IFA_F_TEMPORARY), global("2001:db8::2/64", unix.IFA_F_MANAGETEMPADDR)},
			wantV6: "2001:db8::2",
		},
		{
			name:   "a temporary IPv6 address when there is nothing else",
			addrs:  []ifaceAddr{global("2001:db8::a:b:c:d/64", unix.IFA_F_TEMPORARY)},
			wantV6: "2001:db8::a:b:c:d",
		},
		{
			name:   "IPv6 only",
			addrs:  []ifaceAddr{link("fe80::1/64"), global("fd00::2/64", 0)},
			wantV6: "fd00::2",
		},
		{
			name:   "deprecated IPv4 skipped",
			addrs:  []ifaceAddr{global("192.0.2.2/24", unix.IFA_F_DEPRECATED), global("198.51.100.2/24", 0)},
			wantV4: "198.51.100.2",
		},
		{name: "nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vips := map[netip.Addr]struct{}{}
			for _, v := range tt.vips {
				vips[netip.MustParseAddr(v)] = struct{}{}
			}
			v4, v6 := pickNodeAddrs(tt.addrs, vips)
			if got := addrString(v4); got != tt.wantV4 {
				t.Errorf("IPv4 = %q, want %q", got, tt.wantV4)
			}
			if got := addrString(v6); got != tt.wantV6 {
				t.Errorf("IPv6 = %q, want %q", got, tt.wantV6)
			}
		})
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
