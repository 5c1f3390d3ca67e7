package iptables

import (
	"log/slog"
	"strings"
)

// Changes says in words what Ensure or Remove did, for logs and for the
// output of remove-failover. Each entry is one sentence about one rule or
// table.
type Changes struct {
	// Added lists rules and tables that were created or restored.
	Added []string
	// Removed lists rules and tables that were deleted.
	Removed []string
	// Unchanged lists rules and tables that were already as wanted (Ensure)
	// or already absent (Remove).
	Unchanged []string
	// Missing lists chains that do not exist. They are not created and
	// nothing was done in them; the caller should log this and go on.
	Missing []string
}

// Changed reports whether anything was added or removed.
func (c Changes) Changed() bool { return len(c.Added)+len(c.Removed) > 0 }

// String gives the changes as one line, "nothing to do" when there are none.
func (c Changes) String() string {
	var parts []string
	for _, p := range []struct {
		label string
		items []string
	}{
		{"added", c.Added},
		{"removed", c.Removed},
		{"unchanged", c.Unchanged},
		{"missing", c.Missing},
	} {
		if len(p.items) > 0 {
			parts = append(parts, p.label+": "+strings.Join(p.items, "; "))
		}
	}
	if len(parts) == 0 {
		return "nothing to do"
	}
	return strings.Join(parts, "; ")
}

// LogValue groups the non-empty lists, so `slog.Any("firewall", changes)`
// logs them as firewall.added=[...] and so on.
func (c Changes) LogValue() slog.Value {
	var attrs []slog.Attr
	add := func(key string, items []string) {
		if len(items) > 0 {
			attrs = append(attrs, slog.Any(key, items))
		}
	}
	add("added", c.Added)
	add("removed", c.Removed)
	add("unchanged", c.Unchanged)
	add("missing", c.Missing)
	return slog.GroupValue(attrs...)
}

func (c *Changes) merge(o Changes) {
	c.Added = append(c.Added, o.Added...)
	c.Removed = append(c.Removed, o.Removed...)
	c.Unchanged = append(c.Unchanged, o.Unchanged...)
	c.Missing = append(c.Missing, o.Missing...)
}
