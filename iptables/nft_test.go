package iptables_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/iptables"
)

// listing is what nft 1.0.6 prints for the table Ensure writes.
const listing = `table inet keepalived {
	chain input {
		type filter hook input priority filter; policy accept;
		ip protocol vrrp ip daddr 224.0.0.18 accept
		meta l4proto vrrp ip6 daddr ff02::12 accept
	}
}
`

func TestVRRPTableScript(t *testing.T) {
	if diff := cmp.Diff(listing, iptables.VRRPTable().Script()); diff != "" {
		t.Errorf("script (-want +got):\n%s", diff)
	}
}

func TestParseNFTable(t *testing.T) {
	tests := []struct {
		name string
		text string
		want iptables.NFTable
	}{
		{
			name: "our table",
			text: listing,
			want: iptables.VRRPTable(),
		},
		{
			name: "altered by hand",
			text: `table inet keepalived {
	set peers {
		type ipv4_addr
		elements = { 192.0.2.1, 192.0.2.2,
			     192.0.2.3 }
	}

	chain input {
		type filter hook input priority filter; policy accept;
		ip protocol vrrp ip daddr 224.0.0.18 counter packets 3 bytes 120 accept
	}

	chain extra {
		ip saddr @peers accept
	}
}`,
			want: iptables.NFTable{
				Family: "inet",
				Name:   "keepalived",
				Chains: []iptables.NFChain{
					{
						Name:  "input",
						Spec:  "type filter hook input priority filter; policy accept;",
						Rules: []string{"ip protocol vrrp ip daddr 224.0.0.18 counter packets 3 bytes 120 accept"},
					},
					{Name: "extra", Rules: []string{"ip saddr @peers accept"}},
				},
				Other: []string{
					"set peers {",
					"type ipv4_addr",
					"elements = { 192.0.2.1, 192.0.2.2,",
					"192.0.2.3 }",
					"}",
				},
			},
		},
		{
			name: "empty table",
			text: "table ip6 x {\n}\n",
			want: iptables.NFTable{Family: "ip6", Name: "x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := iptables.ParseNFTable(tt.text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Equal(iptables.VRRPTable()) != (tt.name == "our table") {
				t.Errorf("Equal(VRRPTable()) = %v", tt.name != "our table")
			}
		})
	}
}

func TestParseNFTableErrors(t *testing.T) {
	for _, text := range []string{
		"",
		"table inet keepalived {\n\tchain input {\n",
		"chain input {\n}\n",
		"table inet keepalived {\n}\ntable inet other {\n}\n",
		"table inet {\n}\n",
	} {
		if got, err := iptables.ParseNFTable(text); err == nil {
			t.Errorf("ParseNFTable(%q) = %+v, want an error", text, got)
		}
	}
}

func FuzzParseNFTable(f *testing.F) {
	f.Add(listing)
	f.Add("table ip t {\n\tset s {\n\t\ttype ipv4_addr\n\t}\n\tchain c {\n\t\taccept\n\t}\n}\n")
	f.Add("table inet k {\n\tmap m {\n\t\tchain x {\n\t\t}\n\t}\n}\n")
	f.Fuzz(func(t *testing.T, text string) {
		tb, err := iptables.ParseNFTable(text)
		if err != nil {
			return
		}
		again, err := iptables.ParseNFTable(tb.Script())
		if err != nil {
			t.Fatalf("parsing the script of %+v: %v\nscript:\n%s", tb, err, tb.Script())
		}
		if !again.Equal(tb) {
			t.Fatalf("round trip changed the table:\n%s", cmp.Diff(tb, again))
		}
	})
}
