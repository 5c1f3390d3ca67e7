// Package iptables lets VRRP multicast through the host firewall, the way the
// shipped keepalived-ipfailover image does: a rule at the top of a filter
// chain (OPENSHIFT_HA_IPTABLES_CHAIN), or a table "inet keepalived" in native
// nftables (OPENSHIFT_HA_NFTABLES_RULE). Ensure adds what is missing and never
// a second copy; Remove deletes exactly that again.
package iptables

import (
	"context"
	"errors"
	"fmt"
	"time"

	goipt "github.com/coreos/go-iptables/iptables"
)

// LockTimeout bounds how long an iptables command waits for the xtables lock
// held by kube-proxy, the SDN or firewalld (`iptables --wait`).
const LockTimeout = 10 * time.Second

// maxCopies bounds how many copies of the rule Remove deletes from one
// chain, so that a backend whose delete has no effect cannot loop forever.
const maxCopies = 1000

// Options says which firewall changes are wanted.
type Options struct {
	// Chain is the filter chain that gets the rule at its top
	// (OPENSHIFT_HA_IPTABLES_CHAIN). Empty: no iptables rule.
	Chain string
	// IPv6 adds the ip6tables rule too (there are IPv6 VIPs).
	IPv6 bool
	// NFTables manages the "inet keepalived" table
	// (OPENSHIFT_HA_NFTABLES_RULE).
	NFTables bool
}

// Tables is the part of go-iptables' *IPTables the firewall uses, for one
// address family.
type Tables interface {
	ChainExists(table, chain string) (bool, error)
	Exists(table, chain string, rulespec ...string) (bool, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Delete(table, chain string, rulespec ...string) error
}

// Backends are the implementations a Firewall drives. Only those the
// Options need must be set.
type Backends struct {
	IPv4 Tables // needed when Options.Chain is set
	IPv6 Tables // needed when Options.Chain is set and Options.IPv6
	NFT  NFT    // needed when Options.NFTables
}

// Firewall adds and removes the VRRP rule and table.
type Firewall struct {
	opts Options
	b    Backends
}

// New returns a Firewall using the iptables, ip6tables and nft binaries,
// looking up only those the options need.
func New(opts Options) (*Firewall, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var b Backends
	if opts.Chain != "" {
		ipt, err := goipt.New(goipt.IPFamily(goipt.ProtocolIPv4), goipt.Timeout(int(LockTimeout.Seconds())))
		if err != nil {
			return nil, fmt.Errorf("setting up iptables: %w", err)
		}
		b.IPv4 = ipt
		if opts.IPv6 {
			ip6t, err := goipt.New(goipt.IPFamily(goipt.ProtocolIPv6), goipt.Timeout(int(LockTimeout.Seconds())))
			if err != nil {
				return nil, fmt.Errorf("setting up ip6tables: %w", err)
			}
			b.IPv6 = ip6t
		}
	}
	if opts.NFTables {
		nft, err := NewNFTCmd()
		if err != nil {
			return nil, err
		}
		b.NFT = nft
	}
	return NewWith(opts, b)
}

// NewWith returns a Firewall using the given backends, e.g. the fakes of
// package iptablestest.
func NewWith(opts Options, b Backends) (*Firewall, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	switch {
	case opts.Chain != "" && b.IPv4 == nil:
		return nil, errors.New("iptables chain set but no IPv4 backend")
	case opts.Chain != "" && opts.IPv6 && b.IPv6 == nil:
		return nil, errors.New("iptables chain set with IPv6 but no IPv6 backend")
	case opts.NFTables && b.NFT == nil:
		return nil, errors.New("nftables wanted but no nft backend")
	}
	return &Firewall{opts: opts, b: b}, nil
}

func (o Options) validate() error {
	if o.Chain == "" {
		return nil
	}
	if err := CheckChainName(o.Chain); err != nil {
		return fmt.Errorf("chain %q: %w", o.Chain, err)
	}
	return nil
}

type family struct {
	f   Family
	ipt Tables
}

func (fw *Firewall) families() []family {
	if fw.opts.Chain == "" {
		return nil
	}
	fams := []family{{IPv4, fw.b.IPv4}}
	if fw.opts.IPv6 {
		fams = append(fams, family{IPv6, fw.b.IPv6})
	}
	return fams
}

// Ensure puts the VRRP rule at the top of the chain, unless the rule is
// already anywhere in it, and makes the nftables table exactly VRRPTable.
// A chain that does not exist is not created: it is listed in
// Changes.Missing and the rest goes on. The context is checked between
// steps (go-iptables takes none; its commands are bounded by LockTimeout).
func (fw *Firewall) Ensure(ctx context.Context) (Changes, error) {
	return fw.each(ctx, ensureRule, ensureTable)
}

// Remove deletes every copy of the VRRP rule from the chain and the
// nftables table. Missing rules, chains and tables are not errors.
func (fw *Firewall) Remove(ctx context.Context) (Changes, error) {
	return fw.each(ctx, removeRule, removeTable)
}

// each applies rule to the chain of every family and table to the
// nftables table, going on after a failure and joining the errors.
func (fw *Firewall) each(ctx context.Context,
	rule func(family, string) (Changes, error),
	table func(context.Context, NFT, NFTable) (Changes, error),
) (Changes, error) {
	var all Changes
	var errs []error
	for _, fam := range fw.families() {
		if err := ctx.Err(); err != nil {
			return all, err
		}
		c, err := rule(fam, fw.opts.Chain)
		all.merge(c)
		errs = append(errs, err)
	}
	if fw.opts.NFTables {
		c, err := table(ctx, fw.b.NFT, VRRPTable())
		all.merge(c)
		errs = append(errs, err)
	}
	return all, errors.Join(errs...)
}

// isNotExist matches go-iptables' *Error and the fake's error.
func isNotExist(err error) bool {
	var ne interface{ IsNotExist() bool }
	return errors.As(err, &ne) && ne.IsNotExist()
}

func where(fam family, chain string) string {
	return fmt.Sprintf("%s %s/%s", fam.f, Table, chain)
}

func missing(fam family, chain string) string {
	return fmt.Sprintf("%s chain %s/%s does not exist (not created)", fam.f, Table, chain)
}

func ensureRule(fam family, chain string) (Changes, error) {
	var c Changes
	rule := Rule(fam.f)
	ok, err := fam.ipt.ChainExists(Table, chain)
	if err != nil {
		return c, fmt.Errorf("checking for chain %s: %w", where(fam, chain), err)
	}
	if !ok {
		c.Missing = append(c.Missing, missing(fam, chain))
		return c, nil
	}
	ok, err = fam.ipt.Exists(Table, chain, rule...)
	if err != nil {
		return c, fmt.Errorf("checking for rule %v in %s: %w", rule, where(fam, chain), err)
	}
	if ok {
		c.Unchanged = append(c.Unchanged, fmt.Sprintf("%s: %q already present", where(fam, chain), ruleText(fam.f)))
		return c, nil
	}
	if err := fam.ipt.Insert(Table, chain, 1, rule...); err != nil {
		if isNotExist(err) { // the chain went away since we looked
			c.Missing = append(c.Missing, missing(fam, chain))
			return c, nil
		}
		return c, fmt.Errorf("inserting rule %v into %s: %w", rule, where(fam, chain), err)
	}
	c.Added = append(c.Added, fmt.Sprintf("%s: %q at position 1", where(fam, chain), ruleText(fam.f)))
	return c, nil
}

func removeRule(fam family, chain string) (Changes, error) {
	var c Changes
	rule := Rule(fam.f)
	ok, err := fam.ipt.ChainExists(Table, chain)
	if err != nil {
		return c, fmt.Errorf("checking for chain %s: %w", where(fam, chain), err)
	}
	if !ok {
		c.Missing = append(c.Missing, missing(fam, chain))
		return c, nil
	}
	n := 0
	for ; n < maxCopies; n++ {
		ok, err := fam.ipt.Exists(Table, chain, rule...)
		if err != nil {
			return removed(c, fam, chain, n), fmt.Errorf("checking for rule %v in %s: %w", rule, where(fam, chain), err)
		}
		if !ok {
			break
		}
		if err := fam.ipt.Delete(Table, chain, rule...); err != nil {
			if isNotExist(err) { // removed by someone else meanwhile
				break
			}
			return removed(c, fam, chain, n), fmt.Errorf("deleting rule %v from %s: %w", rule, where(fam, chain), err)
		}
	}
	if n == maxCopies {
		return removed(c, fam, chain, n), fmt.Errorf("deleting rule %v from %s: still present after %d deletions", rule, where(fam, chain), n)
	}
	return removed(c, fam, chain, n), nil
}

func removed(c Changes, fam family, chain string, n int) Changes {
	switch n {
	case 0:
		c.Unchanged = append(c.Unchanged, fmt.Sprintf("%s: %q not present", where(fam, chain), ruleText(fam.f)))
	case 1:
		c.Removed = append(c.Removed, fmt.Sprintf("%s: %q", where(fam, chain), ruleText(fam.f)))
	default:
		c.Removed = append(c.Removed, fmt.Sprintf("%s: %q (%d copies)", where(fam, chain), ruleText(fam.f), n))
	}
	return c
}

func ensureTable(ctx context.Context, nft NFT, want NFTable) (Changes, error) {
	var c Changes
	got, ok, err := nft.ListTable(ctx, want.Family, want.Name)
	if err != nil {
		return c, fmt.Errorf("listing nftables table %s: %w", want.ID(), err)
	}
	if ok && got.Equal(want) {
		c.Unchanged = append(c.Unchanged, fmt.Sprintf("nftables table %s already as wanted", want.ID()))
		return c, nil
	}
	if err := nft.ReplaceTable(ctx, want); err != nil {
		return c, fmt.Errorf("writing nftables table %s: %w", want.ID(), err)
	}
	if ok {
		c.Added = append(c.Added, fmt.Sprintf("nftables table %s restored (it had been changed)", want.ID()))
	} else {
		c.Added = append(c.Added, fmt.Sprintf("nftables table %s", want.ID()))
	}
	return c, nil
}

func removeTable(ctx context.Context, nft NFT, want NFTable) (Changes, error) {
	var c Changes
	_, ok, err := nft.ListTable(ctx, want.Family, want.Name)
	if err != nil {
		return c, fmt.Errorf("listing nftables table %s: %w", want.ID(), err)
	}
	if !ok {
		c.Unchanged = append(c.Unchanged, fmt.Sprintf("nftables table %s not present", want.ID()))
		return c, nil
	}
	if err := nft.DeleteTable(ctx, want.Family, want.Name); err != nil {
		return c, fmt.Errorf("deleting nftables table %s: %w", want.ID(), err)
	}
	c.Removed = append(c.Removed, fmt.Sprintf("nftables table %s", want.ID()))
	return c, nil
}
