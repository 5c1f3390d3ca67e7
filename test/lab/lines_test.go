package lab

import (
	"io"
	"strings"
	"sync"
	"testing"
)

// TestPrefixWriter: lines split over writes, and several in one write, come out whole and
// prefixed; an unfinished line waits for its newline.
func TestPrefixWriter(t *testing.T) {
	var out strings.Builder
	var mu sync.Mutex
	w := PrefixWriter(&out, &mu, "node1: ")
	for _, s := range []string{"Keepalived_vrrp", "[7]: up\nsecond\nthi", "rd\nunfinished"} {
		if n, err := io.WriteString(w, s); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	want := "node1: Keepalived_vrrp[7]: up\nnode1: second\nnode1: third\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
