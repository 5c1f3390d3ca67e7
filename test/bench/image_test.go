package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestImageRows(t *testing.T) {
	t.Run("measured", func(t *testing.T) {
		rows := imageRows("localhost/ipfailover:dev", ImageSize{Bytes: 71_650_391, Compressed: 29_449_238, ID: "1d87bace907e4c1f", Revision: "abc123"}, nil)
		if len(rows) != 2 {
			t.Fatalf("%d rows, want 2", len(rows))
		}
		size, comp := rows[0], rows[1]
		if size.Name != rowImage || size.N != 1 || size.Median != 71.650391 || size.Pass == nil || !*size.Pass {
			t.Errorf("size row = %+v, want 71.650391 MB passing the 80 MB bound", size)
		}
		if !strings.Contains(size.Note, "1d87bace907e of commit abc123") {
			t.Errorf("size note %q does not name the build", size.Note)
		}
		if comp.Name != rowImageCompressed || comp.Median != 29.449238 || comp.Pass != nil {
			t.Errorf("compressed row = %+v, want 29.449238 MB and no target", comp)
		}
		var b bytes.Buffer
		if err := (&Report{Rows: rows}).WriteMarkdown(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "| image size | 71.7 MB | 71.7 MB |") {
			t.Errorf("markdown:\n%s\nwant the size as podman prints it, 71.7 MB", b.String())
		}
	})
	t.Run("over the bound", func(t *testing.T) {
		rows := imageRows("img", ImageSize{Bytes: 80_000_001, Compressed: 1}, nil)
		if rows[0].Pass == nil || *rows[0].Pass {
			t.Errorf("80.000001 MB passes the 80 MB bound: %+v", rows[0])
		}
	})
	t.Run("no image", func(t *testing.T) {
		rows := imageRows("img", ImageSize{}, errors.New("no image img (make image builds it)"))
		if len(rows) != 1 || rows[0].N != 0 || rows[0].Pass != nil || rows[0].Note != "not measured: no image img (make image builds it)" {
			t.Errorf("rows = %+v, want one unmeasured row that says why, with no target to miss", rows)
		}
	})
}

// TestMeasureImage reads a real image when this machine has podman and
// the image make image builds (IPFAILOVER_IMAGE names another).
func TestMeasureImage(t *testing.T) {
	image := os.Getenv("IPFAILOVER_IMAGE")
	if image == "" {
		image = "localhost/ipfailover:dev"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := MeasureImage(ctx, image)
	var a absent
	if errors.As(err, &a) {
		t.Skip(a)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The archive holds every layer once, compressed: smaller than the
	// image, and not empty.
	if s.Bytes <= 0 || s.Compressed <= 0 || s.Compressed >= s.Bytes || s.ID == "" {
		t.Errorf("MeasureImage(%s) = %+v", image, s)
	}
	t.Logf("%s: %d bytes, %d compressed, id %s, revision %s", image, s.Bytes, s.Compressed, s.ID, s.Revision)
	if _, err := MeasureImage(ctx, image+"-none"); err == nil || !strings.Contains(err.Error(), "make image builds it") {
		t.Errorf("MeasureImage of a missing image: %v, want an error saying make image builds it", err)
	}
}
