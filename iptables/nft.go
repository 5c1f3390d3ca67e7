package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// The nftables form uses the nft binary, fed one script on stdin (`nft -f -`),
// rather than github.com/google/nftables:
//   - `nft -f` applies the whole script as one kernel transaction, so the table
//     is replaced atomically (never a moment without the VRRP rule, never two);
//   - the rules are written in the same syntax `nft list` prints, which is what
//     an admin compares against and what our restore check reads back;
//   - the library would have us assemble the bytecode (payload offsets,
//     comparisons) by hand, an easy place for silent mistakes, and add a
//     dependency, while nft ships in the image anyway.

// NFTable is one nftables table, as `nft list table` prints it.
type NFTable struct {
	Family string
	Name   string
	Chains []NFChain
	// Other holds lines of the table that are not chains (sets, maps,
	// flags...). Our table has none, so any line here means it was altered.
	Other []string
}

// NFChain is one chain of an NFTable.
type NFChain struct {
	Name string
	// Spec is the base-chain line, e.g.
	// "type filter hook input priority filter; policy accept;", or empty.
	Spec  string
	Rules []string
}

// ID names the table as nft does: "inet keepalived".
func (t NFTable) ID() string { return t.Family + " " + t.Name }

// Equal reports whether two tables have the same chains and rules.
func (t NFTable) Equal(o NFTable) bool {
	return t.Family == o.Family && t.Name == o.Name &&
		slices.Equal(t.Other, o.Other) &&
		slices.EqualFunc(t.Chains, o.Chains, func(a, b NFChain) bool {
			return a.Name == b.Name && a.Spec == b.Spec && slices.Equal(a.Rules, b.Rules)
		})
}

// VRRPTable is the table OPENSHIFT_HA_NFTABLES_RULE asks for: inet
// keepalived, chain input hooked at input with priority filter, accepting
// VRRP to the IPv4 and IPv6 VRRP groups. The rules are spelled as nft 1.0
// prints them, so a table we made compares equal to its own listing.
func VRRPTable() NFTable {
	return NFTable{
		Family: "inet",
		Name:   "keepalived",
		Chains: []NFChain{{
			Name: "input",
			Spec: "type filter hook input priority filter; policy accept;",
			Rules: []string{
				"ip protocol vrrp ip daddr 224.0.0.18 accept",
				"meta l4proto vrrp ip6 daddr ff02::12 accept",
			},
		}},
	}
}

// Script renders the table as nft input.
func (t NFTable) Script() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s {\n", t.ID())
	for _, line := range t.Other {
		fmt.Fprintf(&b, "\t%s\n", line)
	}
	for _, c := range t.Chains {
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Spec != "" {
			fmt.Fprintf(&b, "\t\t%s\n", c.Spec)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// ParseNFTable reads the output of `nft list table FAMILY NAME`. It
// understands chains; everything else inside the table (blocks included)
// goes to Other, so that it shows up as a difference.
func ParseNFTable(text string) (NFTable, error) {
	var (
		t       NFTable
		chain   *NFChain
		inTable bool
		done    bool
		other   int // depth inside a block that is not a chain
	)
	for n, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case line == "":
		case done:
			return NFTable{}, fmt.Errorf("line %d: %q after the end of the table", n+1, line)
		case !inTable:
			f := strings.Fields(line)
			if len(f) != 4 || f[0] != "table" || f[3] != "{" {
				return NFTable{}, fmt.Errorf("line %d: want \"table FAMILY NAME {\", got %q", n+1, line)
			}
			t.Family, t.Name, inTable = f[1], f[2], true
		case other > 0:
			t.Other = append(t.Other, line)
			if line == "}" {
				other--
			} else if strings.HasSuffix(line, "{") {
				other++
			}
		case chain != nil && line == "}":
			chain = nil
		case chain != nil:
			if chain.Spec == "" && len(chain.Rules) == 0 && strings.HasPrefix(line, "type ") {
				chain.Spec = line
				continue
			}
			chain.Rules = append(chain.Rules, line)
		case line == "}":
			done = true
		default:
			if f := strings.Fields(line); len(f) == 3 && f[0] == "chain" && f[2] == "{" {
				t.Chains = append(t.Chains, NFChain{Name: f[1]})
				chain = &t.Chains[len(t.Chains)-1]
				continue
			}
			t.Other = append(t.Other, line)
			if strings.HasSuffix(line, "{") {
				other++
			}
		}
	}
	if !done {
		return NFTable{}, errors.New("table not terminated")
	}
	return t, nil
}

// NFT is the nftables backend: read, atomically replace and delete one table.
type NFT interface {
	// ListTable returns the table, or ok=false when it does not exist.
	ListTable(ctx context.Context, family, name string) (t NFTable, ok bool, err error)
	// ReplaceTable makes the table exactly t, in one transaction.
	ReplaceTable(ctx context.Context, t NFTable) error
	// DeleteTable deletes the table; a missing table is not an error.
	DeleteTable(ctx context.Context, family, name string) error
}

// NFTCmd is the NFT backend that runs the nft binary.
type NFTCmd struct {
	// Path is the nft binary.
	Path string
}

// NewNFTCmd finds nft in PATH.
func NewNFTCmd() (*NFTCmd, error) {
	p, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("finding nft: %w", err)
	}
	return &NFTCmd{Path: p}, nil
}

func (n *NFTCmd) run(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.Path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return nil, &NFTError{Args: args, Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.Bytes(), nil
}

// NFTError is a failed nft run with what it printed on stderr.
type NFTError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *NFTError) Error() string {
	return fmt.Sprintf("nft %s: %v: %s", strings.Join(e.Args, " "), e.Err, e.Stderr)
}

func (e *NFTError) Unwrap() error { return e.Err }

// IsNotExist reports whether nft failed because the object does not exist.
func (e *NFTError) IsNotExist() bool {
	return strings.Contains(e.Stderr, "No such file or directory")
}

// ListTable runs `nft list table FAMILY NAME`.
func (n *NFTCmd) ListTable(ctx context.Context, family, name string) (NFTable, bool, error) {
	out, err := n.run(ctx, "", "list", "table", family, name)
	if nerr, ok := errors.AsType[*NFTError](err); ok && nerr.IsNotExist() {
		return NFTable{}, false, nil
	}
	if err != nil {
		return NFTable{}, false, err
	}
	t, err := ParseNFTable(string(out))
	if err != nil {
		return NFTable{}, false, fmt.Errorf("reading table %s %s: %w", family, name, err)
	}
	return t, true, nil
}

// ReplaceTable feeds nft one script that creates the table if needed,
// deletes it and creates it again with t's content. nft -f applies a script
// as a single transaction: other readers see the old table or the new one.
func (n *NFTCmd) ReplaceTable(ctx context.Context, t NFTable) error {
	script := fmt.Sprintf("add table %s\ndelete table %s\n%s", t.ID(), t.ID(), t.Script())
	_, err := n.run(ctx, script, "-f", "-")
	return err
}

// DeleteTable deletes the table in one transaction that first adds it, so a
// missing table is not an error (nft 1.0.6 has no "destroy").
func (n *NFTCmd) DeleteTable(ctx context.Context, family, name string) error {
	id := family + " " + name
	_, err := n.run(ctx, fmt.Sprintf("add table %s\ndelete table %s\n", id, id), "-f", "-")
	return err
}
