package glyph

import (
	"image"
	"image/color"
	"testing"
)

// TestDraw: a character is its glyph's pixels at the scale, upper case
// prints as lower case, and text advances a glyph and a column each.
func TestDraw(t *testing.T) {
	ink := color.RGBA{0, 0, 0, 255}
	img := image.NewRGBA(image.Rect(0, 0, 40, 20))
	Draw(img, 0, 0, "-L", 2, ink)
	// '-' is its middle row: row 3, every column.
	for _, p := range []image.Point{{0, 6}, {9, 7}} {
		if img.At(p.X, p.Y) != ink {
			t.Errorf("pixel %v of '-' at scale 2 is not inked", p)
		}
	}
	if img.At(0, 0) == ink {
		t.Error("pixel (0, 0) of '-' is inked")
	}
	// 'l' (from 'L') starts at x 12: its top row is 0x0c, columns 1 and 2.
	if img.At(12+2, 0) != ink || img.At(12, 0) == ink {
		t.Error("'L' does not print as the glyph of 'l' one advance further")
	}
	if got := Width("-L", 2); got != 24 {
		t.Errorf("Width(\"-L\", 2) = %d, want 24", got)
	}
	if !Has('Q') || !Has(' ') || Has('~') {
		t.Error("Has: want upper case and space printable, '~' not")
	}
}
