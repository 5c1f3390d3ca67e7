package config

import (
	"fmt"
	"slices"
	"strings"
)

// UnknownVariables lists the OPENSHIFT_HA_* variables in env (KEY=value
// pairs) that the program does not read, typos most likely, each with the
// closest known name when one is near.
func UnknownVariables(env []string) []string {
	known := Variables()
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OPENSHIFT_HA_") || slices.Contains(known, name) {
			continue
		}
		best, dist := "", 1<<30
		for _, k := range known {
			if d := editDistance(name, k); d < dist {
				best, dist = k, d
			}
		}
		if dist <= 4 {
			out = append(out, fmt.Sprintf("%s (did you mean %s?)", name, best))
		} else {
			out = append(out, name)
		}
	}
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
