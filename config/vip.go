package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParseVIPs expands OPENSHIFT_HA_VIRTUAL_IPS into addresses, in the order given.
//
// Entries are separated by commas (and, as the shipped image allows, by
// white space). Each entry is an address or a range:
//
//	192.0.2.100-102            last-octet range
//	2001:db8::1f39-1f3B        last-group range, hex in either case
//	192.0.2.100-192.0.2.102    a range of two full addresses
//
// A range stays inside its last octet (IPv4) or last group (IPv6) and
// ascends. Duplicates are refused, as is anything that is not a usable
// unicast address. Every problem is reported, not only the first.
func ParseVIPs(s string) ([]netip.Addr, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t'
	})
	if len(fields) == 0 {
		return nil, errors.New("no address given")
	}
	var (
		out  []netip.Addr
		errs []error
		seen = map[netip.Addr]string{}
	)
	for _, f := range fields {
		addrs, err := parseVIPEntry(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, a := range addrs {
			if prev, dup := seen[a]; dup {
				errs = append(errs, fmt.Errorf("%s is listed twice (in %q and %q)", a, prev, f))
				continue
			}
			seen[a] = f
			out = append(out, a)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// parseVIPEntry parses one address or range.
func parseVIPEntry(entry string) ([]netip.Addr, error) {
	if strings.Contains(entry, "/") {
		return nil, fmt.Errorf("%q: give addresses without a prefix length (keepalived adds VIPs as /32 and /128)", entry)
	}
	first, last, isRange := strings.Cut(entry, "-")
	start, err := parseVIPAddr(first)
	if err != nil && !isRange {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%q: %w", entry, err)
	}
	if !isRange {
		return []netip.Addr{start}, nil
	}
	end, err := rangeEnd(start, last)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", entry, err)
	}
	if end.Less(start) {
		return nil, fmt.Errorf("%q: range descends (%s is before %s)", entry, end, start)
	}
	var out []netip.Addr
	for a := start; ; a = a.Next() {
		out = append(out, a)
		if a == end {
			break
		}
	}
	return out, nil
}

// rangeEnd reads the part after the dash: a full address, or the last
// octet (decimal) or the last group (hex) of one.
func rangeEnd(start netip.Addr, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errors.New("range has no end")
	}
	if strings.Contains(s, "-") {
		return netip.Addr{}, errors.New("more than one dash")
	}
	if start.Is4() && strings.Contains(s, ".") || start.Is6() && strings.Contains(s, ":") {
		end, err := parseVIPAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("range end: %w", err)
		}
		if !sameButLast(start, end) {
			if start.Is4() {
				return netip.Addr{}, fmt.Errorf("range crosses the last octet (%s and %s differ before it)", start, end)
			}
			return netip.Addr{}, fmt.Errorf("range crosses the last group (%s and %s differ before it)", start, end)
		}
		return end, nil
	}
	if start.Is4() {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n > 255 {
			return netip.Addr{}, fmt.Errorf("range end %q is not an octet 0..255", s)
		}
		b := start.As4()
		b[3] = byte(n)
		return netip.AddrFrom4(b), nil
	}
	if len(s) > 4 {
		return netip.Addr{}, fmt.Errorf("range end %q is not a hex group 0..ffff", s)
	}
	n, err := strconv.ParseUint(s, 16, 16)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("range end %q is not a hex group 0..ffff", s)
	}
	b := start.As16()
	b[14], b[15] = byte(n>>8), byte(n)
	return netip.AddrFrom16(b), nil
}

func sameButLast(a, b netip.Addr) bool {
	if a.Is4() != b.Is4() {
		return false
	}
	x, y := a.AsSlice(), b.AsSlice()
	keep := len(x) - 1
	if a.Is6() {
		keep = len(x) - 2
	}
	return string(x[:keep]) == string(y[:keep])
}

// parseVIPAddr parses one address and refuses those that cannot float
// between nodes.
func parseVIPAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	switch {
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%s: no zone allowed", s)
	case a.Is4In6():
		return netip.Addr{}, fmt.Errorf("%s: write IPv4 addresses in dotted form", s)
	case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return netip.Addr{}, fmt.Errorf("%s is not a unicast address a node can hold", s)
	}
	return a, nil
}
