package kube

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

func TestPodBase(t *testing.T) {
	for i, want := range []string{"203.0.113.0", "203.0.113.64", "203.0.113.128"} {
		if got := podBase(i); got != netip.MustParseAddr(want) {
			t.Errorf("podBase(%d) = %s, want %s", i, got, want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:           "/a/b",
		`/with\040space`: "/with space",
		`/tab\011x`:      "/tab\tx",
		`/back\134slash`: `/back\slash`,
		`/trailing\04`:   `/trailing\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPauseImage: the archive is an OCI image layout whose one manifest
// carries the name containerd imports it under, and whose layer holds
// the binary as /pause, the entrypoint.
func TestPauseImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "pause.tar")
	if err := writePauseImage(bin, archive); err != nil {
		t.Fatal(err)
	}
	files := untar(t, archive)
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != sandboxImage {
		t.Errorf("image name %q, want %q", got, sandboxImage)
	}
	blob := func(digest string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", digest)
		}
		return b
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v %+v", err, manifest)
	}
	var config struct {
		Config struct{ Entrypoint []string } `json:"config"`
	}
	if err := json.Unmarshal(blob(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(config.Config.Entrypoint, []string{"/pause"}) {
		t.Errorf("entrypoint %q, want /pause", config.Config.Entrypoint)
	}
	layer := untarBytes(t, blob(manifest.Layers[0].Digest))
	if !bytes.Equal(layer["pause"], []byte("#!/bin/true\n")) {
		t.Errorf("the layer holds %v, want pause", slices.Collect(maps.Keys(layer)))
	}
}

func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return untarBytes(t, b)
}

func untarBytes(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = data
	}
}

// TestOverlayBuilds: the user's overlay builds with kustomize over deploy/
// and sets what it says: image, settings, replicas, imagePullPolicy.
func TestOverlayBuilds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my-failover")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Kustomize loads bases relative to the overlay: put it beside deploy/.
	o := Overlay{Base: "overlays/kubernetes", Image: "localhost/ipfailover:dev", Replicas: 3,
		Config: map[string]string{"OPENSHIFT_HA_VIRTUAL_IPS": "192.0.2.100-102", "OPENSHIFT_HA_NETWORK_INTERFACE": "eth0"}}
	k, err := o.Kustomization(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(k, "  - "+filepath.Join("..", "..")) {
		t.Fatalf("the base is not relative to the overlay:\n%s", k)
	}
	fsys := filesys.MakeFsOnDisk()
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	// krusty refuses bases outside the overlay's root only for files; a
	// base directory anywhere is fine.
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build: %v\n%s", err, k)
	}
	var dep appsv1.Deployment
	var cm struct{ Data map[string]string }
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		switch r.GetKind() {
		case "Deployment":
			if err := yaml.Unmarshal(y, &dep); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			if r.GetName() == "ipfailover-config" {
				if err := yaml.Unmarshal(y, &cm); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "localhost/ipfailover:dev" || c.ImagePullPolicy != "Never" || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("image %q pull %q replicas %v", c.Image, c.ImagePullPolicy, dep.Spec.Replicas)
	}
	if cm.Data["OPENSHIFT_HA_VIRTUAL_IPS"] != "192.0.2.100-102" || cm.Data["OPENSHIFT_HA_NETWORK_INTERFACE"] != "eth0" {
		t.Errorf("ipfailover-config %v", cm.Data)
	}
}

// TestUpDownLeavesNothing brings a cluster up (without the ipfailover
// image: the pause image alone), checks it and its machine operations, and
// takes it down twice: the machine is as it was, processes, namespaces,
// mounts, cgroups, files and sysctls. It needs root and the binaries of
// make kube-bins (IPFAILOVER_KUBE_BIN, which make kube-test sets).
func TestUpDownLeavesNothing(t *testing.T) {
	bin := os.Getenv("IPFAILOVER_KUBE_BIN")
	if bin == "" || os.Geteuid() != 0 {
		t.Skip("needs root and IPFAILOVER_KUBE_BIN (make kube-test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Below a directory Up makes, as out/kube in a fresh clone.
	dir := filepath.Join(t.TempDir(), "out", "cluster")
	before := machineState(t, dir)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	c, err := Up(ctx, Options{Dir: dir, Bin: bin, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Down(context.Background(), dir, log); err != nil {
			t.Error(err)
		}
	}()
	st := c.State()
	during := machineState(t, dir)
	if n := len(ours(during.netns, st.Name)); !during.files[dir] || n != 6 || len(ours(during.cgroups, st.Name)) == 0 {
		t.Errorf("the cluster up: %d of its network namespaces, %+v", n, during)
	}

	n := c.Nodes[1]
	if err := n.Kill(ctx, Kubelet); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Running(Kubelet); ok {
		t.Error("the kubelet runs after Kill")
	}
	if err := n.Start(ctx, Kubelet); err != nil {
		t.Fatal(err)
	}
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := n.Die(ctx); err != nil {
		t.Fatal(err)
	}
	if pids, err := cgroupPIDs(n.cgroup()); err != nil || len(pids) > 0 {
		t.Errorf("after Die, %s still has processes %v (%v)", n.Name, pids, err)
	}
	booted := time.Now()
	if err := n.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	// The rebooted kubelet reports again.
	err = poll(ctx, time.Minute, n.Name+"'s kubelet reporting after the boot", func() (bool, error) {
		var node corev1.Node
		if err := c.KubectlJSON(ctx, &node, "get", "node", n.Name); err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && cond.LastHeartbeatTime.After(booted) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		if err := Down(ctx, dir, log); err != nil {
			t.Fatalf("Down #%d: %v", i+1, err)
		}
	}
	after := machineState(t, dir)
	if diff := before.diff(after, st.Name); diff != "" {
		t.Errorf("the machine after Down differs from before Up:\n%s", diff)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// state is what a cluster could leave on the machine.
type state struct {
	netns   []string        // lab namespaces
	cgroups []string        // ipfk-* cgroups
	mounts  []string        // mount points under the cluster's directory or in /run/ipfailover-kube
	files   map[string]bool // whether each path a node's daemons default to exists
	sysctls map[string]string
	procs   []string // processes running a binary of the cluster
}

// defaultPaths are where containerd, the kubelet, CNI and etcd write by
// default on a real node: each machine of the cluster has its own, and the
// host's must not appear.
var defaultPaths = []string{"/var/lib/kubelet", "/var/lib/containerd", "/run/containerd", "/etc/cni/net.d", "/opt/cni",
	"/var/lib/cni", "/var/log/pods", "/var/log/containers", "/opt/containerd", "/usr/libexec/kubernetes", "/etc/kubernetes",
	"/var/lib/etcd", registryDir}

func machineState(t *testing.T, dir string) state {
	t.Helper()
	s := state{files: map[string]bool{}, sysctls: map[string]string{}}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		s.netns = append(s.netns, e.Name())
	}
	hs, err := hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		found, _ := filepath.Glob(filepath.Join(h, "ipfk-*"))
		s.cgroups = append(s.cgroups, found...)
	}
	points, err := mountPoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range points {
		if strings.HasPrefix(p, dir) || strings.HasPrefix(p, registryDir) {
			s.mounts = append(s.mounts, p)
		}
	}
	for _, p := range append(defaultPaths, dir, filepath.Dir(dir)) {
		_, err := os.Stat(p)
		s.files[p] = err == nil
	}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		s.sysctls[k] = strings.TrimSpace(string(v))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // exited, waiting for init to reap it
		}
		s.procs = append(s.procs, strings.ReplaceAll(string(b), "\x00", " "))
	}
	return s
}

// ours keeps the names that contain the cluster's name.
func ours(names []string, name string) []string {
	var o []string
	for _, s := range names {
		if strings.Contains(s, name) {
			o = append(o, s)
		}
	}
	return o
}

// diff describes what after has that before had not, and the reverse,
// for what belongs to the cluster called name; "" when nothing.
func (before state) diff(after state, name string) string {
	var out []string
	if left := ours(after.netns, name); len(left) > 0 {
		out = append(out, "network namespaces: "+strings.Join(left, " "))
	}
	if left := ours(after.cgroups, name); len(left) > 0 {
		out = append(out, "cgroups: "+strings.Join(left, " "))
	}
	if len(after.mounts) > 0 {
		out = append(out, "mounts: "+strings.Join(after.mounts, " "))
	}
	for _, p := range slices.Sorted(maps.Keys(before.files)) {
		if before.files[p] != after.files[p] {
			out = append(out, p+" exists: "+map[bool]string{true: "now", false: "no more"}[after.files[p]])
		}
	}
	// Another cluster up on the machine (another worktree's) keeps the
	// kubelets' values; only a machine with none must have its own back.
	if !before.files[registryDir] && !after.files[registryDir] {
		for k, v := range before.sysctls {
			if after.sysctls[k] != v {
				out = append(out, "sysctl "+k+": "+v+" before, "+after.sysctls[k]+" after")
			}
		}
	}
	if len(after.procs) > 0 {
		out = append(out, "processes: "+strings.Join(after.procs, "; "))
	}
	return strings.Join(out, "\n")
}
