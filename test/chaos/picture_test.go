package chaos

import (
	"bytes"
	"image/png"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/glyph"
)

func TestDrawTimeline(t *testing.T) {
	d := twoFaults()
	a := Analyse(d)
	var buf bytes.Buffer
	if err := DrawTimeline(&buf, d, &a, 0); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if w := img.Bounds().Dx(); w != picWidth {
		t.Errorf("width %d, want %d", w, picWidth)
	}
	plot := picWidth - picLeft - picRight
	x := func(ms int) int { return picLeft + plot*ms/10000 }
	row := func(i int) int { return 50 + i*(rowHeight+rowGap) + rowHeight/2 }
	for _, tc := range []struct {
		what string
		x, y int
		want any
	}{
		{"node1 holds A at 0.5 s", x(500), row(0), nodeColours[0]},
		{"node2 holds A at 5.2 s", x(5200), row(1), nodeColours[1]},
		{"nobody else at 0.5 s", x(500), row(1), faint},
		{"A on two nodes at 4.05 s", x(4050), row(3), twice},
		{"the client's outage at 2 s", x(2000), row(5), outageRed},
		{"the client answered at 5.2 s", x(5200), row(5), answered},
		{"the client sends to node2 at 5.2 s", x(5200), row(4), nodeColours[1]},
	} {
		if got := img.At(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: pixel (%d, %d) is %v, want %v", tc.what, tc.x, tc.y, got, tc.want)
		}
	}
}

// TestGlyphs: every character the pictures print has a glyph.
func TestGlyphs(t *testing.T) {
	text := "0123456789 abcdefghijklmnopqrstuvwxyz .:-_%#()/=+,<>"
	for _, k := range allKinds() {
		text += string(k) + shortKind(k)
	}
	for _, r := range text {
		if !glyph.Has(r) {
			t.Errorf("no glyph for %q", r)
		}
	}
	if got := axisStep(10 * time.Minute); got != 30*time.Second {
		t.Errorf("axis step of 10 minutes = %s, want 30s (20 ticks)", got)
	}
}
