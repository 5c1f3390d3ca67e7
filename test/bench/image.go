package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// The image rows: the size of the image `make image` builds, read from the
// image itself with podman. They need no lab; on a machine without podman
// (scripts/install-deps.sh image installs it) or without the image, one row
// says so and the bench goes on.
const (
	rowImage           = "image size"
	rowImageCompressed = "image size, compressed (what a node pulls)"
	// targetImageMB is the image's bound, in podman's MB (10^6 bytes), as
	// images/image-test.sh holds it.
	targetImageMB = 80
	// imageBefore is the image of commit bfe72e4, measured the same way:
	// Debian's keepalived with net-snmp, Perl and GLib, and apt's caches.
	imageBefore = "262 MB (95 MB compressed) at commit bfe72e4, with Debian's keepalived package and apt's caches"
)

// ImageSize is what the image rows report.
type ImageSize struct {
	// Bytes is podman's size of the image: its layers uncompressed, as
	// `podman images` shows it.
	Bytes int64
	// Compressed is the image's OCI archive (`podman save --format
	// oci-archive`) gzip'd at the default level, as a registry push
	// compresses layers: about what every node pulls.
	Compressed int64
	// ID and Revision (the org.opencontainers.image.revision label) say
	// which build was measured.
	ID, Revision string
}

// absent: nothing to measure on this machine (no podman, or no image).
type absent string

func (a absent) Error() string { return string(a) }

// MeasureImage reads image's sizes with podman.
func MeasureImage(ctx context.Context, image string) (ImageSize, error) {
	if _, err := exec.LookPath("podman"); err != nil {
		return ImageSize{}, absent("podman is not installed (scripts/install-deps.sh image installs it)")
	}
	if exec.CommandContext(ctx, "podman", "image", "exists", image).Run() != nil {
		return ImageSize{}, absent("no image " + image + " (make image builds it)")
	}
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format",
		`{{.Size}} {{.Id}} {{index .Labels "org.opencontainers.image.revision"}}`, image).Output()
	if err != nil {
		return ImageSize{}, fmt.Errorf("podman image inspect %s: %w", image, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return ImageSize{}, fmt.Errorf("podman image inspect %s: %q, want size and id", image, out)
	}
	s := ImageSize{ID: f[1]}
	if len(f) > 2 {
		s.Revision = f[2]
	}
	if s.Bytes, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return ImageSize{}, fmt.Errorf("podman image inspect %s: size %q: %w", image, f[0], err)
	}
	if s.Compressed, err = compressedArchive(ctx, image); err != nil {
		return ImageSize{}, err
	}
	return s, nil
}

// compressedArchive is the length of image's OCI archive gzip'd.
func compressedArchive(ctx context.Context, image string) (int64, error) {
	var n countingWriter
	zw := gzip.NewWriter(&n)
	var stderr bytes.Buffer
	save := exec.CommandContext(ctx, "podman", "save", "--format", "oci-archive", image)
	save.Stdout, save.Stderr = zw, &stderr
	if err := save.Run(); err != nil {
		return 0, fmt.Errorf("podman save %s: %w: %s", image, err, strings.TrimSpace(stderr.String()))
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	return int64(n), nil
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// imageRows are the rows of image's measurement: its size against its
// bound and its compressed size, or one row saying why there is none.
func imageRows(image string, s ImageSize, err error) []Row {
	if err != nil {
		return []Row{{Name: rowImage, Unit: DecimalMB, Note: "not measured: " + err.Error()}}
	}
	mb := func(b int64) float64 { return float64(b) / 1e6 }
	size := Row{Name: rowImage, Unit: DecimalMB, N: 1}.summarize([]float64{mb(s.Bytes)})
	size.Check("median", targetImageMB)
	short := func(id string) string { return id[:min(len(id), 12)] }
	built := short(s.ID)
	if s.Revision != "" {
		built += " of commit " + short(s.Revision)
	}
	size.Note = fmt.Sprintf("%s (image %s), as podman images shows it; %s", image, built, imageBefore)
	comp := Row{Name: rowImageCompressed, Unit: DecimalMB, N: 1}.summarize([]float64{mb(s.Compressed)})
	comp.Note = "its OCI archive (podman save) gzip'd at the default level, as a registry push compresses layers"
	return []Row{size, comp}
}
