package iptables

import (
	"fmt"
	"strings"
)

// Table is the netfilter table the VRRP rule goes into.
const Table = "filter"

// VRRP multicast groups (RFC 5798): 224.0.0.18 for IPv4, ff02::12 for IPv6.
const (
	vrrpGroup4 = "224.0.0.18/32"
	vrrpGroup6 = "ff02::12/128"
)

// Family selects iptables (IPv4) or ip6tables (IPv6).
type Family int

// The two address families.
const (
	IPv4 Family = iota
	IPv6
)

// String names the command that manages the family.
func (f Family) String() string {
	if f == IPv6 {
		return "ip6tables"
	}
	return "iptables"
}

// Rule builds the rule spec accepting VRRP multicast for the family. It is
// exactly the one the shipped image inserts (`iptables -I <chain> 1 -d
// 224.0.0.18/32 -j ACCEPT`), spelled the way `iptables -S` prints it, so a node
// migrating from that image finds its rule instead of adding a second copy.
// Ensure and Remove use only this function, so what is inserted is what is
// checked and deleted.
func Rule(f Family) []string {
	group := vrrpGroup4
	if f == IPv6 {
		group = vrrpGroup6
	}
	return []string{"-d", group, "-j", "ACCEPT"}
}

// ruleText is the rule as one line, for messages.
func ruleText(f Family) string { return strings.Join(Rule(f), " ") }

// maxChainName is the longest chain name iptables accepts
// (XT_EXTENSION_MAXNAMELEN - 1).
const maxChainName = 28

// validChain reports why a chain name cannot be passed to iptables, or nil.
// The name reaches iptables as one argument (no shell), but a name starting
// with '-' or '!' would be read as an option and whitespace is not allowed
// by iptables itself.
func validChain(name string) error {
	switch {
	case len(name) > maxChainName:
		return fmt.Errorf("chain name %q: longer than %d characters", name, maxChainName)
	case strings.HasPrefix(name, "-"), strings.HasPrefix(name, "!"):
		return fmt.Errorf("chain name %q: must not start with '-' or '!'", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f || r > 0x7e }):
		return fmt.Errorf("chain name %q: only printable ASCII without spaces is allowed", name)
	}
	return nil
}
