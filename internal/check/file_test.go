package check

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "ipfailover", "check")
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	f, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "0\n" {
		t.Errorf("a new file says %q, want 0: failing until the probes pass", got)
	}
	if err := f.Report(true); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "1\n" {
		t.Errorf("after passing: %q, want 1", got)
	}
	if err := f.Report(false); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "0\n" {
		t.Errorf("after failing: %q, want 0", got)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory holds %v, want only the file", entries)
	}
}

func TestFileRefusesUnwritableDirectory(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "run")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFile(filepath.Join(blocker, "check")); err == nil {
		t.Error("NewFile under a file: no error")
	}
}
