package syncbuf

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestConcurrentWritesAndLines(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				fmt.Fprintf(&b, "w%d line %d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := len(b.Lines("line")); got != 400 {
		t.Errorf("%d lines, want 400", got)
	}
	if got := b.Lines("w3 line 49"); !slices.Equal(got, []string{"w3 line 49"}) {
		t.Errorf("Lines(w3 line 49) = %q", got)
	}
}
