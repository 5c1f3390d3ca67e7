// Package iptablestest holds in-memory fakes of the iptables and nftables
// backends, for tests of packages that drive a firewall.
package iptablestest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ipfailover/ipfailover/iptables"
)

// NotExistError is what the fakes return for a missing chain, rule or table,
// like go-iptables' error its IsNotExist method reports true.
type NotExistError struct{ What string }

func (e *NotExistError) Error() string { return e.What + " does not exist" }

// IsNotExist reports true.
func (e *NotExistError) IsNotExist() bool { return true }

// Tables is an in-memory iptables for one address family: a map from
// "filter/INPUT" to the chain's rules in order, each rule spec joined by
// single spaces. It implements iptables.Tables.
type Tables struct {
	mu    sync.Mutex
	rules map[string][]string
	// Fail, when set, is called before every operation ("chain_exists",
	// "exists", "insert", "delete"); a non-nil result is returned as that
	// operation's error.
	Fail func(op string) error
}

var _ iptables.Tables = (*Tables)(nil)

// NewTables returns a fake with the given chains ("filter/INPUT"), empty.
func NewTables(chains ...string) *Tables {
	t := &Tables{rules: map[string][]string{}}
	for _, c := range chains {
		t.rules[c] = nil
	}
	return t
}

// NewChain creates an empty chain.
func (t *Tables) NewChain(table, chain string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.rules[table+"/"+chain]; !ok {
		t.rules[table+"/"+chain] = nil
	}
}

// Append adds a rule at the end of a chain, creating the chain if needed,
// as a test's setup.
func (t *Tables) Append(table, chain string, rulespec ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := table + "/" + chain
	t.rules[k] = append(t.rules[k], strings.Join(rulespec, " "))
}

// Rules returns a copy of a chain's rules, nil when the chain is missing.
func (t *Tables) Rules(table, chain string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.rules[table+"/"+chain])
}

// Chains returns the names of all chains ("filter/INPUT"), sorted.
func (t *Tables) Chains() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k := range t.rules {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (t *Tables) fail(op string) error {
	if t.Fail == nil {
		return nil
	}
	return t.Fail(op)
}

// ChainExists reports whether the chain exists.
func (t *Tables) ChainExists(table, chain string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.fail("chain_exists"); err != nil {
		return false, err
	}
	_, ok := t.rules[table+"/"+chain]
	return ok, nil
}

// Exists reports whether the exact rule is in the chain. Like `iptables -C`,
// a missing chain gives false without an error.
func (t *Tables) Exists(table, chain string, rulespec ...string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.fail("exists"); err != nil {
		return false, err
	}
	return slices.Contains(t.rules[table+"/"+chain], strings.Join(rulespec, " ")), nil
}

// Insert puts the rule at 1-based position pos.
func (t *Tables) Insert(table, chain string, pos int, rulespec ...string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.fail("insert"); err != nil {
		return err
	}
	k := table + "/" + chain
	rules, ok := t.rules[k]
	if !ok {
		return &NotExistError{What: "chain " + k}
	}
	if pos < 1 || pos > len(rules)+1 {
		return fmt.Errorf("index of insertion %d out of range for %s with %d rules", pos, k, len(rules))
	}
	t.rules[k] = slices.Insert(rules, pos-1, strings.Join(rulespec, " "))
	return nil
}

// Delete removes the first copy of the rule.
func (t *Tables) Delete(table, chain string, rulespec ...string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.fail("delete"); err != nil {
		return err
	}
	k := table + "/" + chain
	rules, ok := t.rules[k]
	if !ok {
		return &NotExistError{What: "chain " + k}
	}
	i := slices.Index(rules, strings.Join(rulespec, " "))
	if i < 0 {
		return &NotExistError{What: fmt.Sprintf("rule %q in %s", strings.Join(rulespec, " "), k)}
	}
	t.rules[k] = slices.Delete(rules, i, i+1)
	return nil
}

// NFT is an in-memory nftables: a set of tables keyed by "inet keepalived".
// It implements iptables.NFT.
type NFT struct {
	mu     sync.Mutex
	tables map[string]iptables.NFTable
	// Fail, when set, is called before every operation ("list", "replace",
	// "delete"); a non-nil result is returned as that operation's error.
	Fail func(op string) error
}

var _ iptables.NFT = (*NFT)(nil)

// NewNFT returns an empty fake.
func NewNFT() *NFT { return &NFT{tables: map[string]iptables.NFTable{}} }

func (n *NFT) fail(op string) error {
	if n.Fail == nil {
		return nil
	}
	return n.Fail(op)
}

// Set stores a table as is, e.g. one "altered by hand".
func (n *NFT) Set(t iptables.NFTable) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tables[t.ID()] = clone(t)
}

// Table returns a stored table.
func (n *NFT) Table(family, name string) (iptables.NFTable, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.tables[family+" "+name]
	return clone(t), ok
}

// Tables returns the stored tables' names ("inet keepalived"), sorted.
func (n *NFT) Tables() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for k := range n.tables {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ListTable returns a stored table.
func (n *NFT) ListTable(_ context.Context, family, name string) (iptables.NFTable, bool, error) {
	if err := n.fail("list"); err != nil {
		return iptables.NFTable{}, false, err
	}
	t, ok := n.Table(family, name)
	return t, ok, nil
}

// ReplaceTable stores t, replacing any table of its name.
func (n *NFT) ReplaceTable(_ context.Context, t iptables.NFTable) error {
	if err := n.fail("replace"); err != nil {
		return err
	}
	n.Set(t)
	return nil
}

// DeleteTable removes a table; a missing one is not an error.
func (n *NFT) DeleteTable(_ context.Context, family, name string) error {
	if err := n.fail("delete"); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.tables, family+" "+name)
	return nil
}

func clone(t iptables.NFTable) iptables.NFTable {
	t.Other = slices.Clone(t.Other)
	t.Chains = slices.Clone(t.Chains)
	for i := range t.Chains {
		t.Chains[i].Rules = slices.Clone(t.Chains[i].Rules)
	}
	return t
}
