package kube

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Images reach the nodes as OCI archives imported into each node's
// containerd (namespace k8s.io, the CRI's): nothing is pulled. The pause
// image is packed here from the pause binary make kube-bins compiles from
// the Kubernetes module's pause.c; the others are saved from podman's
// store (make image).

// saveImages writes the pause image and each podman image to an OCI
// archive under the cluster's directory and returns their paths.
func (c *Cluster) saveImages(ctx context.Context, images []string) ([]string, error) {
	dir := filepath.Join(c.st.Dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pause := filepath.Join(dir, "pause.tar")
	if err := writePauseImage(filepath.Join(c.st.Bin, "pause"), pause); err != nil {
		return nil, err
	}
	archives := []string{pause}
	c.st.Images = []string{sandboxImage}
	for i, ref := range images {
		path := filepath.Join(dir, fmt.Sprintf("image%d.tar", i+1))
		began := time.Now()
		out, err := exec.CommandContext(ctx, "podman", "--runtime", "/usr/sbin/runc", "save", "--format", "oci-archive", "-o", path, ref).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("podman save %s (make image builds it): %w: %s", ref, err, strings.TrimSpace(string(out)))
		}
		c.log.Info("saved", "image", ref, "took", time.Since(began).Round(time.Millisecond))
		archives = append(archives, path)
		c.st.Images = append(c.st.Images, ref)
	}
	return archives, nil
}

// importImages imports the archives into the node's containerd and
// returns how long that took.
func (m *Machine) importImages(ctx context.Context, archives []string) (time.Duration, error) {
	all := time.Now()
	for _, a := range archives {
		began := time.Now()
		if _, err := m.Exec(ctx, "ctr", "--address", containerdSocket, "--namespace", "k8s.io", "images", "import", a); err != nil {
			return 0, err
		}
		m.c.log.Info("imported", "machine", m.Name, "archive", filepath.Base(a), "took", time.Since(began).Round(time.Millisecond))
	}
	return time.Since(all), nil
}

// writePauseImage packs the pause binary as the image sandboxImage: one
// layer holding /pause, its entrypoint.
func writePauseImage(binary, archive string) error {
	pause, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(pause)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(pause); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	type blob struct {
		digest string
		data   []byte
	}
	var blobs []blob
	add := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs = append(blobs, blob{d, b})
		return d, len(b)
	}
	layerDigest, layerSize := add(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	configDigest, configSize := add(config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": configDigest, "size": configSize},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	if err != nil {
		return err
	}
	manifestDigest, manifestSize := add(manifest)
	_, tag, _ := strings.Cut(strings.TrimPrefix(sandboxImage, "localhost/"), ":")
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"digest":    manifestDigest,
			"size":      manifestSize,
			"platform":  map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{
				"io.containerd.image.name":          sandboxImage,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	aw := tar.NewWriter(&out)
	file := func(name string, b []byte) error {
		if err := aw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := aw.Write(b)
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := file("index.json", index); err != nil {
		return err
	}
	for _, b := range blobs {
		if err := file("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.data); err != nil {
			return err
		}
	}
	if err := aw.Close(); err != nil {
		return err
	}
	return os.WriteFile(archive, out.Bytes(), 0o644)
}
