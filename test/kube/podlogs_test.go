package kube

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPodLogs: what the kubelet appends is copied as it comes, a pod's
// log deleted with the pod stays copied, a rotated log starts again, and
// other namespaces' pods are left out.
func TestPodLogs(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	write := func(rel, text string, flag int) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	kept := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(out, "node1", rel))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return string(b)
	}
	p := newPodLogs(out, "ipfailover", map[string]string{"node1": root}, time.Hour)
	a := "ipfailover_ipfailover-a_uid1/ipfailover/0.log"
	other := "kube-system_coredns-x_uid2/coredns/0.log"
	write(a, "one\n", os.O_APPEND)
	write(other, "dns\n", os.O_APPEND)
	p.copy()
	write(a, "two\n", os.O_APPEND)
	p.copy()
	p.copy()
	if got := kept(a); got != "one\ntwo\n" {
		t.Errorf("kept %q, want one and two, once each", got)
	}
	if got := kept(other); got != "" {
		t.Errorf("kept another namespace's log: %q", got)
	}
	// Rotated: the new file is shorter than what was copied.
	write(a, "3\n", os.O_TRUNC)
	p.copy()
	if got := kept(a); got != "one\ntwo\n3\n" {
		t.Errorf("after rotation kept %q", got)
	}
	// The pod deleted: its copy stays.
	if err := os.RemoveAll(filepath.Join(root, "ipfailover_ipfailover-a_uid1")); err != nil {
		t.Fatal(err)
	}
	p.copy()
	if got := kept(a); got != "one\ntwo\n3\n" {
		t.Errorf("after the pod went kept %q", got)
	}
}
