// Package repo finds the repository a test runs in and the files git
// tracks there, for the tests that hold the tree to its rules (links,
// file sizes).
package repo

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Tracked returns the repository's top directory, rel from the test's
// package directory (e.g. "../.."), and every file git tracks, relative to
// it.
func Tracked(tb testing.TB, rel string) (string, []string) {
	tb.Helper()
	root, err := filepath.Abs(rel)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(files) < 10 {
		tb.Fatalf("git ls-files listed %d files", len(files))
	}
	return root, files
}
