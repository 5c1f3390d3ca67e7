package iptables_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/iptables"
	"github.com/ipfailover/ipfailover/iptables/iptablestest"
)

const (
	rule4 = "-d 224.0.0.18/32 -j ACCEPT"
	rule6 = "-d ff02::12/128 -j ACCEPT"
	other = "-s 192.0.2.1/32 -j DROP"
)

type fakes struct {
	v4, v6 *iptablestest.Tables
	nft    *iptablestest.NFT
}

func newFakes() fakes {
	return fakes{
		v4:  iptablestest.NewTables("filter/INPUT", "filter/FORWARD", "filter/OUTPUT"),
		v6:  iptablestest.NewTables("filter/INPUT", "filter/FORWARD", "filter/OUTPUT"),
		nft: iptablestest.NewNFT(),
	}
}

func (f fakes) firewall(t *testing.T, opts iptables.Options) *iptables.Firewall {
	t.Helper()
	fw, err := iptables.NewWith(opts, iptables.Backends{IPv4: f.v4, IPv6: f.v6, NFT: f.nft})
	if err != nil {
		t.Fatalf("NewWith(%+v): %v", opts, err)
	}
	return fw
}

func TestRule(t *testing.T) {
	if diff := cmp.Diff(strings.Fields(rule4), iptables.Rule(iptables.IPv4)); diff != "" {
		t.Errorf("IPv4 rule (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(strings.Fields(rule6), iptables.Rule(iptables.IPv6)); diff != "" {
		t.Errorf("IPv6 rule (-want +got):\n%s", diff)
	}
}

func TestEnsureIdempotent(t *testing.T) {
	tests := []struct {
		name   string
		opts   iptables.Options
		before map[string][]string // v4 chain → rules already there
		want4  []string            // rules of the chain afterwards
		want6  []string
		first  iptables.Changes
		again  iptables.Changes
	}{
		{
			name:  "empty INPUT gets the rule",
			opts:  iptables.Options{Chain: "INPUT"},
			want4: []string{rule4},
			first: iptables.Changes{Added: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" at position 1`}},
			again: iptables.Changes{Unchanged: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" already present`}},
		},
		{
			name:   "rule goes above the other rules",
			opts:   iptables.Options{Chain: "INPUT"},
			before: map[string][]string{"INPUT": {other, "-p tcp -m tcp --dport 22 -j ACCEPT"}},
			want4:  []string{rule4, other, "-p tcp -m tcp --dport 22 -j ACCEPT"},
			first:  iptables.Changes{Added: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" at position 1`}},
			again:  iptables.Changes{Unchanged: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" already present`}},
		},
		{
			name:   "rule lower in the chain is left where it is",
			opts:   iptables.Options{Chain: "INPUT"},
			before: map[string][]string{"INPUT": {other, rule4}},
			want4:  []string{other, rule4},
			first:  iptables.Changes{Unchanged: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" already present`}},
			again:  iptables.Changes{Unchanged: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" already present`}},
		},
		{
			name:   "custom chain",
			opts:   iptables.Options{Chain: "OPENSHIFT-VRRP"},
			before: map[string][]string{"OPENSHIFT-VRRP": {other}},
			want4:  []string{rule4, other},
			first:  iptables.Changes{Added: []string{`iptables filter/OPENSHIFT-VRRP: "-d 224.0.0.18/32 -j ACCEPT" at position 1`}},
			again:  iptables.Changes{Unchanged: []string{`iptables filter/OPENSHIFT-VRRP: "-d 224.0.0.18/32 -j ACCEPT" already present`}},
		},
		{
			name:  "IPv6 too",
			opts:  iptables.Options{Chain: "INPUT", IPv6: true},
			want4: []string{rule4},
			want6: []string{rule6},
			first: iptables.Changes{Added: []string{
				`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" at position 1`,
				`ip6tables filter/INPUT: "-d ff02::12/128 -j ACCEPT" at position 1`,
			}},
			again: iptables.Changes{Unchanged: []string{
				`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" already present`,
				`ip6tables filter/INPUT: "-d ff02::12/128 -j ACCEPT" already present`,
			}},
		},
		{
			name: "missing chain is reported, not created",
			opts: iptables.Options{Chain: "NOPE", IPv6: true},
			first: iptables.Changes{Missing: []string{
				"iptables chain filter/NOPE does not exist (not created)",
				"ip6tables chain filter/NOPE does not exist (not created)",
			}},
			again: iptables.Changes{Missing: []string{
				"iptables chain filter/NOPE does not exist (not created)",
				"ip6tables chain filter/NOPE does not exist (not created)",
			}},
		},
		{
			name: "no chain: nothing to do",
			opts: iptables.Options{IPv6: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakes()
			for chain, rules := range tt.before {
				f.v4.NewChain("filter", chain)
				for _, r := range rules {
					f.v4.Append("filter", chain, strings.Fields(r)...)
				}
			}
			chainsBefore := f.v4.Chains()
			fw := f.firewall(t, tt.opts)
			for i := range 3 {
				got, err := fw.Ensure(t.Context())
				if err != nil {
					t.Fatalf("Ensure #%d: %v", i+1, err)
				}
				want := tt.again
				if i == 0 {
					want = tt.first
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Ensure #%d changes (-want +got):\n%s", i+1, diff)
				}
			}
			if tt.opts.Chain != "" {
				if diff := cmp.Diff(tt.want4, f.v4.Rules("filter", tt.opts.Chain)); diff != "" {
					t.Errorf("IPv4 chain (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.want6, f.v6.Rules("filter", tt.opts.Chain)); diff != "" {
					t.Errorf("IPv6 chain (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(chainsBefore, f.v4.Chains()); diff != "" {
				t.Errorf("IPv4 chains changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string(nil), f.nft.Tables()); diff != "" {
				t.Errorf("nft tables without NFTables (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name   string
		opts   iptables.Options
		before []string // INPUT rules of both families (with rule4/rule6 per family)
		want   []string // INPUT afterwards
		first  iptables.Changes
	}{
		{
			name:   "one copy",
			opts:   iptables.Options{Chain: "INPUT"},
			before: []string{rule4, other},
			want:   []string{other},
			first:  iptables.Changes{Removed: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT"`}},
		},
		{
			name:   "duplicates an old image left",
			opts:   iptables.Options{Chain: "INPUT"},
			before: []string{rule4, other, rule4, rule4},
			want:   []string{other},
			first:  iptables.Changes{Removed: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" (3 copies)`}},
		},
		{
			name:   "not there",
			opts:   iptables.Options{Chain: "INPUT"},
			before: []string{other},
			want:   []string{other},
			first:  iptables.Changes{Unchanged: []string{`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" not present`}},
		},
		{
			name:  "missing chain is not an error",
			opts:  iptables.Options{Chain: "NOPE"},
			first: iptables.Changes{Missing: []string{"iptables chain filter/NOPE does not exist (not created)"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakes()
			for _, r := range tt.before {
				f.v4.Append("filter", "INPUT", strings.Fields(r)...)
			}
			fw := f.firewall(t, tt.opts)
			got, err := fw.Remove(t.Context())
			if err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if diff := cmp.Diff(tt.first, got); diff != "" {
				t.Errorf("Remove changes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, f.v4.Rules("filter", "INPUT")); diff != "" {
				t.Errorf("INPUT (-want +got):\n%s", diff)
			}
			got, err = fw.Remove(t.Context())
			if err != nil {
				t.Fatalf("second Remove: %v", err)
			}
			if got.Changed() {
				t.Errorf("second Remove changed something: %v", got)
			}
		})
	}
}

func TestEnsureThenRemoveRestoresChain(t *testing.T) {
	f := newFakes()
	f.v4.Append("filter", "INPUT", strings.Fields(other)...)
	f.v6.Append("filter", "INPUT", strings.Fields(other)...)
	fw := f.firewall(t, iptables.Options{Chain: "INPUT", IPv6: true, NFTables: true})
	if _, err := fw.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := fw.Remove(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := iptables.Changes{Removed: []string{
		`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT"`,
		`ip6tables filter/INPUT: "-d ff02::12/128 -j ACCEPT"`,
		"nftables table inet keepalived",
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Remove (-want +got):\n%s", diff)
	}
	for name, tb := range map[string]*iptablestest.Tables{"v4": f.v4, "v6": f.v6} {
		if diff := cmp.Diff([]string{other}, tb.Rules("filter", "INPUT")); diff != "" {
			t.Errorf("%s INPUT after Remove (-want +got):\n%s", name, diff)
		}
	}
	if n := f.nft.Tables(); len(n) != 0 {
		t.Errorf("nft tables after Remove: %v", n)
	}
}

func TestNFTables(t *testing.T) {
	f := newFakes()
	unrelated := iptables.NFTable{Family: "inet", Name: "filter", Chains: []iptables.NFChain{{Name: "input", Rules: []string{"tcp dport 22 accept"}}}}
	f.nft.Set(unrelated)
	fw := f.firewall(t, iptables.Options{NFTables: true})

	for i := range 3 {
		got, err := fw.Ensure(t.Context())
		if err != nil {
			t.Fatalf("Ensure #%d: %v", i+1, err)
		}
		want := iptables.Changes{Unchanged: []string{"nftables table inet keepalived already as wanted"}}
		if i == 0 {
			want = iptables.Changes{Added: []string{"nftables table inet keepalived"}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Ensure #%d (-want +got):\n%s", i+1, diff)
		}
	}
	if diff := cmp.Diff([]string{"inet filter", "inet keepalived"}, f.nft.Tables()); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}

	// Altered by hand: an extra rule and a dropped one. Ensure restores it.
	altered := iptables.VRRPTable()
	altered.Chains[0].Rules = []string{"tcp dport 80 drop"}
	f.nft.Set(altered)
	got, err := fw.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(iptables.Changes{Added: []string{"nftables table inet keepalived restored (it had been changed)"}}, got); diff != "" {
		t.Errorf("Ensure on altered table (-want +got):\n%s", diff)
	}
	if tb, _ := f.nft.Table("inet", "keepalived"); !tb.Equal(iptables.VRRPTable()) {
		t.Errorf("table not restored: %+v", tb)
	}

	for i := range 2 {
		got, err := fw.Remove(t.Context())
		if err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
		want := iptables.Changes{Unchanged: []string{"nftables table inet keepalived not present"}}
		if i == 0 {
			want = iptables.Changes{Removed: []string{"nftables table inet keepalived"}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Remove #%d (-want +got):\n%s", i+1, diff)
		}
	}
	if diff := cmp.Diff([]string{"inet filter"}, f.nft.Tables()); diff != "" {
		t.Errorf("tables after Remove (-want +got):\n%s", diff)
	}
	if tb, _ := f.nft.Table("inet", "filter"); !tb.Equal(unrelated) {
		t.Errorf("unrelated table changed: %+v", tb)
	}
}

func TestErrorsAreWrapped(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		opts    iptables.Options
		setup   func(f fakes)
		remove  bool
		wantMsg string
	}{
		{
			name:    "insert",
			opts:    iptables.Options{Chain: "INPUT"},
			setup:   func(f fakes) { f.v4.Fail = failOn("insert", boom) },
			wantMsg: "inserting rule [-d 224.0.0.18/32 -j ACCEPT] into iptables filter/INPUT: boom",
		},
		{
			name:    "check",
			opts:    iptables.Options{Chain: "INPUT", IPv6: true},
			setup:   func(f fakes) { f.v6.Fail = failOn("exists", boom) },
			wantMsg: "checking for rule [-d ff02::12/128 -j ACCEPT] in ip6tables filter/INPUT: boom",
		},
		{
			name: "delete",
			opts: iptables.Options{Chain: "INPUT"},
			setup: func(f fakes) {
				f.v4.Append("filter", "INPUT", iptables.Rule(iptables.IPv4)...)
				f.v4.Fail = failOn("delete", boom)
			},
			remove:  true,
			wantMsg: "deleting rule [-d 224.0.0.18/32 -j ACCEPT] from iptables filter/INPUT: boom",
		},
		{
			name:    "nft replace",
			opts:    iptables.Options{NFTables: true},
			setup:   func(f fakes) { f.nft.Fail = failOn("replace", boom) },
			wantMsg: "writing nftables table inet keepalived: boom",
		},
		{
			name:    "nft delete",
			opts:    iptables.Options{NFTables: true},
			setup:   func(f fakes) { f.nft.Set(iptables.VRRPTable()); f.nft.Fail = failOn("delete", boom) },
			remove:  true,
			wantMsg: "deleting nftables table inet keepalived: boom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakes()
			tt.setup(f)
			fw := f.firewall(t, tt.opts)
			op := fw.Ensure
			if tt.remove {
				op = fw.Remove
			}
			_, err := op(t.Context())
			if !errors.Is(err, boom) {
				t.Fatalf("error %v does not wrap %v", err, boom)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("error = %q, want %q", err, tt.wantMsg)
			}
		})
	}
}

// A failing IPv4 side must not stop the IPv6 rule and the table.
func TestEnsureGoesOnAfterError(t *testing.T) {
	boom := errors.New("boom")
	f := newFakes()
	f.v4.Fail = failOn("insert", boom)
	fw := f.firewall(t, iptables.Options{Chain: "INPUT", IPv6: true, NFTables: true})
	got, err := fw.Ensure(t.Context())
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want it to wrap boom", err)
	}
	want := iptables.Changes{Added: []string{
		`ip6tables filter/INPUT: "-d ff02::12/128 -j ACCEPT" at position 1`,
		"nftables table inet keepalived",
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestRemoveGivesUpOnADeleteThatDoesNothing(t *testing.T) {
	f := newFakes()
	f.v4.Append("filter", "INPUT", iptables.Rule(iptables.IPv4)...)
	fw, err := iptables.NewWith(iptables.Options{Chain: "INPUT"}, iptables.Backends{IPv4: noopDelete{f.v4}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = fw.Remove(t.Context())
	if err == nil || !strings.Contains(err.Error(), "still present after 1000 deletions") {
		t.Fatalf("Remove error = %v, want it to give up", err)
	}
}

// noopDelete is a backend whose delete reports success but removes nothing.
type noopDelete struct{ *iptablestest.Tables }

func (noopDelete) Delete(string, string, ...string) error { return nil }

func TestCancelledContext(t *testing.T) {
	f := newFakes()
	fw := f.firewall(t, iptables.Options{Chain: "INPUT"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := fw.Ensure(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure with cancelled context: %v", err)
	}
	if r := f.v4.Rules("filter", "INPUT"); len(r) != 0 {
		t.Errorf("rules added despite cancelled context: %v", r)
	}
}

func TestOptionsValidation(t *testing.T) {
	f := newFakes()
	for _, chain := range []string{"-F", "!x", "IN PUT", "A23456789012345678901234567890", "IN\nPUT"} {
		if _, err := iptables.NewWith(iptables.Options{Chain: chain}, iptables.Backends{IPv4: f.v4}); err == nil {
			t.Errorf("chain %q accepted", chain)
		}
	}
	if _, err := iptables.NewWith(iptables.Options{Chain: "INPUT", IPv6: true}, iptables.Backends{IPv4: f.v4}); err == nil {
		t.Error("IPv6 without an IPv6 backend accepted")
	}
	if _, err := iptables.NewWith(iptables.Options{NFTables: true}, iptables.Backends{}); err == nil {
		t.Error("NFTables without an nft backend accepted")
	}
	if _, err := iptables.NewWith(iptables.Options{}, iptables.Backends{}); err != nil {
		t.Errorf("nothing to do, no backends: %v", err)
	}
}

func TestChangesText(t *testing.T) {
	c := iptables.Changes{
		Added:   []string{"a"},
		Missing: []string{"m1", "m2"},
	}
	if got, want := c.String(), "added: a; missing: m1; m2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (iptables.Changes{}).String(); got != "nothing to do" {
		t.Errorf("empty String() = %q", got)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: dropTime})).Info("firewall", "changes", c)
	if got, want := b.String(), "level=INFO msg=firewall changes.added=[a] changes.missing=\"[m1 m2]\"\n"; got != want {
		t.Errorf("logged %q, want %q", got, want)
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func failOn(op string, err error) func(string) error {
	return func(o string) error {
		if o == op {
			return err
		}
		return nil
	}
}

func TestCheckChainName(t *testing.T) {
	for name, ok := range map[string]bool{
		"INPUT": true, "KUBE-SERVICES": true, "f2b-sshd": true, "IN_public_allow": true,
		strings.Repeat("C", 28): true, strings.Repeat("C", 29): false,
		"": false, "-F": false, "!x": false, "IN PUT": false, "a.b": false, "x\n": false,
	} {
		if err := iptables.CheckChainName(name); (err == nil) != ok {
			t.Errorf("CheckChainName(%q) = %v, want ok %v", name, err, ok)
		}
	}
	if _, err := iptables.NewWith(iptables.Options{Chain: "-F"}, iptables.Backends{}); err == nil || !strings.Contains(err.Error(), `chain "-F"`) {
		t.Errorf("NewWith with chain -F: %v, want a refusal naming it", err)
	}
}
