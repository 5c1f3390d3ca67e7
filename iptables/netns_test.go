package iptables_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	"github.com/ipfailover/ipfailover/iptables"
	"github.com/ipfailover/ipfailover/test/nstest"
)

// These tests run the real iptables, ip6tables and nft, each in a network
// namespace of its own: netfilter state is per namespace, so the host's
// firewall is never touched.

type testNS struct {
	name   string
	handle netns.NsHandle
}

func newNS(t *testing.T) testNS {
	t.Helper()
	name := nstest.New(t, "ipfw")
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("opening netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return testNS{name: name, handle: h}
}

// do runs fn on an OS thread that has joined the namespace, so the commands
// fn starts (iptables, nft) run there too. The thread stays locked and so
// ends with its goroutine rather than going back to the pool.
func (ns testNS) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns.handle); err != nil {
			errc <- fmt.Errorf("entering netns %s: %w", ns.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// run runs a command in the namespace and returns its stdout.
func (ns testNS) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.name}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func (ns testNS) lines(t *testing.T, args ...string) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(ns.run(t, args...)), "\n")
}

func (ns testNS) firewall(t *testing.T, opts iptables.Options) *iptables.Firewall {
	t.Helper()
	var fw *iptables.Firewall
	err := ns.do(func() (err error) {
		fw, err = iptables.New(opts)
		return err
	})
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	return fw
}

func (ns testNS) ensure(t *testing.T, fw *iptables.Firewall) iptables.Changes {
	t.Helper()
	var c iptables.Changes
	if err := ns.do(func() (err error) { c, err = fw.Ensure(t.Context()); return err }); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return c
}

func (ns testNS) remove(t *testing.T, fw *iptables.Firewall) iptables.Changes {
	t.Helper()
	var c iptables.Changes
	if err := ns.do(func() (err error) { c, err = fw.Remove(t.Context()); return err }); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	return c
}

func TestRealIptablesUsesNFTBackend(t *testing.T) {
	ns := newNS(t)
	t.Parallel()
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if v := ns.run(t, cmd, "-V"); !strings.Contains(v, "(nf_tables)") {
			t.Errorf("%s -V = %q, want the nf_tables backend", cmd, v)
		}
	}
	// go-iptables drives iptables-nft: its rule shows up in nft's own view.
	fw := ns.firewall(t, iptables.Options{Chain: "INPUT", IPv6: true})
	ns.ensure(t, fw)
	for fam, want := range map[string]string{
		"ip":  "ip daddr 224.0.0.18 counter packets 0 bytes 0 accept",
		"ip6": "ip6 daddr ff02::12 counter packets 0 bytes 0 accept",
	} {
		listing := ns.run(t, "nft", "list", "chain", fam, "filter", "INPUT")
		if !strings.Contains(listing, want) {
			t.Errorf("nft list chain %s filter INPUT:\n%s\nwant a line %q", fam, listing, want)
		}
	}
}

func TestRealIptables(t *testing.T) {
	ns := newNS(t)
	t.Parallel()
	others := map[string][]string{
		"iptables":  {"-A INPUT -s 192.0.2.1/32 -j DROP", "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT"},
		"ip6tables": {"-A INPUT -s 2001:db8::1/128 -j DROP"},
	}
	for cmd, rules := range others {
		for _, r := range rules {
			ns.run(t, append([]string{cmd}, strings.Fields(r)...)...)
		}
	}
	fw := ns.firewall(t, iptables.Options{Chain: "INPUT", IPv6: true})

	for i := range 3 {
		c := ns.ensure(t, fw)
		if got, want := len(c.Added), map[bool]int{true: 2, false: 0}[i == 0]; got != want {
			t.Errorf("Ensure #%d added %d, want %d: %v", i+1, got, want, c)
		}
		if i > 0 && len(c.Unchanged) != 2 {
			t.Errorf("Ensure #%d: want both rules left alone, got %v", i+1, c)
		}
	}
	want := map[string][]string{
		"iptables":  append([]string{"-P INPUT ACCEPT", "-A INPUT -d 224.0.0.18/32 -j ACCEPT"}, others["iptables"]...),
		"ip6tables": append([]string{"-P INPUT ACCEPT", "-A INPUT -d ff02::12/128 -j ACCEPT"}, others["ip6tables"]...),
	}
	for cmd, w := range want {
		got := ns.lines(t, cmd, "-S", "INPUT")
		t.Logf("%s -S INPUT after Ensure ×3:\n%s", cmd, strings.Join(got, "\n"))
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s -S INPUT after Ensure ×3 (-want +got):\n%s", cmd, diff)
		}
	}

	// An old image left a second copy further down: Remove takes both.
	ns.run(t, "iptables", "-A", "INPUT", "-d", "224.0.0.18/32", "-j", "ACCEPT")
	c := ns.remove(t, fw)
	wantRemoved := []string{
		`iptables filter/INPUT: "-d 224.0.0.18/32 -j ACCEPT" (2 copies)`,
		`ip6tables filter/INPUT: "-d ff02::12/128 -j ACCEPT"`,
	}
	if diff := cmp.Diff(iptables.Changes{Removed: wantRemoved}, c); diff != "" {
		t.Errorf("first Remove (-want +got):\n%s", diff)
	}
	if c := ns.remove(t, fw); c.Changed() || len(c.Unchanged) != 2 {
		t.Errorf("second Remove: %v", c)
	}
	for cmd, rules := range others {
		w := append([]string{"-P INPUT ACCEPT"}, rules...)
		if diff := cmp.Diff(w, ns.lines(t, cmd, "-S", "INPUT")); diff != "" {
			t.Errorf("%s -S INPUT after Remove (-want +got):\n%s", cmd, diff)
		}
	}
}

func TestRealIptablesExistingRuleLowerDown(t *testing.T) {
	ns := newNS(t)
	t.Parallel()
	ns.run(t, "iptables", "-A", "INPUT", "-s", "192.0.2.1/32", "-j", "DROP")
	ns.run(t, "iptables", "-A", "INPUT", "-d", "224.0.0.18/32", "-j", "ACCEPT")
	fw := ns.firewall(t, iptables.Options{Chain: "INPUT"})
	if c := ns.ensure(t, fw); c.Changed() {
		t.Errorf("Ensure changed a chain that already had the rule: %v", c)
	}
	want := []string{"-P INPUT ACCEPT", "-A INPUT -s 192.0.2.1/32 -j DROP", "-A INPUT -d 224.0.0.18/32 -j ACCEPT"}
	if diff := cmp.Diff(want, ns.lines(t, "iptables", "-S", "INPUT")); diff != "" {
		t.Errorf("iptables -S INPUT (-want +got):\n%s", diff)
	}
}

func TestRealIptablesMissingChain(t *testing.T) {
	ns := newNS(t)
	t.Parallel()
	before := ns.run(t, "nft", "list", "ruleset")
	fw := ns.firewall(t, iptables.Options{Chain: "NOPE", IPv6: true})
	wantMissing := []string{
		"iptables chain filter/NOPE does not exist (not created)",
		"ip6tables chain filter/NOPE does not exist (not created)",
	}
	if diff := cmp.Diff(iptables.Changes{Missing: wantMissing}, ns.ensure(t, fw)); diff != "" {
		t.Errorf("Ensure (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(iptables.Changes{Missing: wantMissing}, ns.remove(t, fw)); diff != "" {
		t.Errorf("Remove (-want +got):\n%s", diff)
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if s := ns.run(t, cmd, "-S"); strings.Contains(s, "NOPE") {
			t.Errorf("%s -S shows a NOPE chain:\n%s", cmd, s)
		}
	}
	after := ns.run(t, "nft", "list", "ruleset")
	if strings.Contains(after, "NOPE") || strings.Contains(after, "224.0.0.18") || strings.Contains(after, "ff02::12") {
		t.Errorf("ruleset changed: before\n%s\nafter\n%s", before, after)
	}
}

func TestRealIptablesCustomChain(t *testing.T) {
	ns := newNS(t)
	t.Parallel()
	for _, cmd := range []string{"iptables", "ip6tables"} {
		ns.run(t, cmd, "-N", "OPENSHIFT-VRRP")
		ns.run(t, cmd, "-A", "OPENSHIFT-VRRP", "-j", "RETURN")
		ns.run(t, cmd, "-A", "INPUT", "-j", "OPENSHIFT-VRRP")
	}
	fw := ns.firewall(t, iptables.Options{Chain: "OPENSHIFT-VRRP", IPv6: true})
	for range 3 {
		ns.ensure(t, fw)
	}
	for cmd, rule := range map[string]string{"iptables": "-d 224.0.0.18/32 -j ACCEPT", "ip6tables": "-d ff02::12/128 -j ACCEPT"} {
		want := []string{"-N OPENSHIFT-VRRP", "-A OPENSHIFT-VRRP " + rule, "-A OPENSHIFT-VRRP -j RETURN"}
		got := ns.lines(t, cmd, "-S", "OPENSHIFT-VRRP")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s -S OPENSHIFT-VRRP (-want +got):\n%s", cmd, diff)
		}
		if in := ns.lines(t, cmd, "-S", "INPUT"); slices.ContainsFunc(in, func(l string) bool { return strings.Contains(l, rule) }) {
			t.Errorf("%s: rule also in INPUT: %v", cmd, in)
		}
	}
	ns.remove(t, fw)
	for _, cmd := range []string{"iptables", "ip6tables"} {
		want := []string{"-N OPENSHIFT-VRRP", "-A OPENSHIFT-VRRP -j RETURN"}
		if diff := cmp.Diff(want, ns.lines(t, cmd, "-S", "OPENSHIFT-VRRP")); diff != "" {
			t.Errorf("%s -S OPENSHIFT-VRRP after Remove (-want +got):\n%s", cmd, diff)
		}
	}
}

// nftRuleset is the part of `nft -j list ruleset` the test looks at.
type nftRuleset struct {
	Nftables []struct {
		Table *struct {
			Family string `json:"family"`
			Name   string `json:"name"`
		} `json:"table"`
		Chain *struct {
			Family string `json:"family"`
			Table  string `json:"table"`
			Name   string `json:"name"`
			Type   string `json:"type"`
			Hook   string `json:"hook"`
			Prio   int    `json:"prio"`
			Policy string `json:"policy"`
		} `json:"chain"`
		Rule *struct {
			Family string            `json:"family"`
			Table  string            `json:"table"`
			Chain  string            `json:"chain"`
			Expr   []json.RawMessage `json:"expr"`
		} `json:"rule"`
	} `json:"nftables"`
}

// keepalivedTables summarises the inet keepalived tables in the ruleset:
// how many there are, their chains ("input filter/input/0/accept") and
// their rules as compact JSON expressions.
func keepalivedTables(t *testing.T, ns testNS) (tables int, chains, rules, others []string) {
	t.Helper()
	var rs nftRuleset
	if err := json.Unmarshal([]byte(ns.run(t, "nft", "-j", "list", "ruleset")), &rs); err != nil {
		t.Fatalf("parsing nft -j list ruleset: %v", err)
	}
	for _, o := range rs.Nftables {
		switch {
		case o.Table != nil && o.Table.Family == "inet" && o.Table.Name == "keepalived":
			tables++
		case o.Table != nil:
			others = append(others, o.Table.Family+" "+o.Table.Name)
		case o.Chain != nil && o.Chain.Family == "inet" && o.Chain.Table == "keepalived":
			chains = append(chains, fmt.Sprintf("%s %s/%s/%d/%s", o.Chain.Name, o.Chain.Type, o.Chain.Hook, o.Chain.Prio, o.Chain.Policy))
		case o.Rule != nil && o.Rule.Family == "inet" && o.Rule.Table == "keepalived":
			var parts []string
			for _, e := range o.Rule.Expr {
				parts = append(parts, string(e))
			}
			rules = append(rules, o.Rule.Chain+": "+strings.Join(parts, " "))
		}
	}
	return tables, chains, rules, others
}

func TestRealNFTables(t *testing.T) {
	ns := newNS(t)
	t.Parallel()
	ns.run(t, "nft", "add table inet other; add chain inet other input { type filter hook input priority 10; }; add rule inet other input tcp dport 22 accept")
	fw := ns.firewall(t, iptables.Options{NFTables: true})

	wantChains := []string{"input filter/input/0/accept"}
	wantRules := []string{
		`input: {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "protocol"}}, "right": "vrrp"}} {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "224.0.0.18"}} {"accept": null}`,
		`input: {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "vrrp"}} {"match": {"op": "==", "left": {"payload": {"protocol": "ip6", "field": "daddr"}}, "right": "ff02::12"}} {"accept": null}`,
	}
	check := func(when string) {
		t.Helper()
		n, chains, rules, others := keepalivedTables(t, ns)
		if n != 1 {
			t.Errorf("%s: %d inet keepalived tables, want 1", when, n)
		}
		if diff := cmp.Diff(wantChains, chains); diff != "" {
			t.Errorf("%s: chains (-want +got):\n%s", when, diff)
		}
		if diff := cmp.Diff(wantRules, rules); diff != "" {
			t.Errorf("%s: rules (-want +got):\n%s", when, diff)
		}
		if diff := cmp.Diff([]string{"inet other"}, others); diff != "" {
			t.Errorf("%s: other tables (-want +got):\n%s", when, diff)
		}
	}

	for i := range 3 {
		c := ns.ensure(t, fw)
		want := iptables.Changes{Unchanged: []string{"nftables table inet keepalived already as wanted"}}
		if i == 0 {
			want = iptables.Changes{Added: []string{"nftables table inet keepalived"}}
		}
		if diff := cmp.Diff(want, c); diff != "" {
			t.Errorf("Ensure #%d (-want +got):\n%s", i+1, diff)
		}
	}
	check("after Ensure ×3")
	t.Logf("nft list table inet keepalived:\n%s", ns.run(t, "nft", "list", "table", "inet", "keepalived"))

	// Altered by hand: a rule deleted, one added, a counter on another.
	ns.run(t, "nft", "flush chain inet keepalived input; add rule inet keepalived input tcp dport 80 drop; add rule inet keepalived input ip protocol vrrp ip daddr 224.0.0.18 counter accept")
	c := ns.ensure(t, fw)
	if diff := cmp.Diff(iptables.Changes{Added: []string{"nftables table inet keepalived restored (it had been changed)"}}, c); diff != "" {
		t.Errorf("Ensure on altered table (-want +got):\n%s", diff)
	}
	check("after restoring")

	for i := range 2 {
		c := ns.remove(t, fw)
		want := iptables.Changes{Unchanged: []string{"nftables table inet keepalived not present"}}
		if i == 0 {
			want = iptables.Changes{Removed: []string{"nftables table inet keepalived"}}
		}
		if diff := cmp.Diff(want, c); diff != "" {
			t.Errorf("Remove #%d (-want +got):\n%s", i+1, diff)
		}
	}
	n, _, _, others := keepalivedTables(t, ns)
	if n != 0 {
		t.Errorf("after Remove ×2: %d inet keepalived tables", n)
	}
	if diff := cmp.Diff([]string{"inet other"}, others); diff != "" {
		t.Errorf("after Remove: other tables (-want +got):\n%s", diff)
	}
}
