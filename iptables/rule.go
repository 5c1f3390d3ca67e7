package iptables

import (
	"errors"
	"fmt"
	"regexp"
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

// chainName is what a chain name may be here: what iptables accepts, less
// what could be read as an option ('-' or '!' first) or need quoting.
var chainName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)

// CheckChainName says why name cannot be a chain for the VRRP rule, or
// returns nil. It is the one rule for OPENSHIFT_HA_IPTABLES_CHAIN: config
// applies it where the value enters, and New again.
func CheckChainName(name string) error {
	switch {
	case len(name) > maxChainName:
		return fmt.Errorf("longer than %d characters", maxChainName)
	case !chainName.MatchString(name):
		return errors.New("not an iptables chain name (letters, digits, '_' and '-', not '-' first)")
	}
	return nil
}
