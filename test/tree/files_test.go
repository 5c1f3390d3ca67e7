// Package tree_test holds the files git tracks to what belongs in the
// repository: source and text, no binaries, nothing huge.
package tree_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipfailover/ipfailover/test/repo"
)

// maxSize bounds a tracked file. Three times the largest file written by
// hand (README.md, 85 KB before the docs tree took its detail) leaves
// prose and tests room to grow; a file past it is nearly always a build
// output, a capture or vendored data, which belong outside git. A file
// that truly needs more goes in largeFiles, with the reason.
const maxSize = 256 << 10

// largeFiles are the tracked files allowed past maxSize, each with why.
var largeFiles = map[string]string{}

// TestTrackedFiles: no tracked file is binary (holds a NUL byte) or larger
// than maxSize.
func TestTrackedFiles(t *testing.T) {
	root, files := repo.Tracked(t, "../..")
	for _, f := range files {
		data, err := content(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			t.Error(err)
			continue
		}
		if err := checkFile(f, data); err != nil {
			t.Error(err)
		}
	}
}

// content is what git stores of the file at path: a symbolic link's
// target (a fixture may point at a binary), or the file's bytes.
func content(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		return []byte(target), err
	}
	return os.ReadFile(path)
}

// checkFile says what is wrong with tracking a file named name holding
// data, or returns nil.
func checkFile(name string, data []byte) error {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return fmt.Errorf("%s is binary (a NUL byte at offset %d): build outputs and binaries are not tracked; git rm --cached it and add it to .gitignore", name, i)
	}
	if _, ok := largeFiles[name]; !ok && len(data) > maxSize {
		return fmt.Errorf("%s has %d bytes, more than %d: if it is generated or captured data, keep it out of git; if it must be tracked, add it to largeFiles with the reason", name, len(data), maxSize)
	}
	return nil
}

func TestCheckFile(t *testing.T) {
	for _, tt := range []struct {
		name    string
		data    []byte
		problem string
	}{
		{"text", []byte("package main\n"), ""},
		{"utf8", []byte("router ids are offset+1, offset+2, … in instance order\n"), ""},
		{"elf", []byte("\x7fELF\x02\x01\x01\x00\x00"), "binary"},
		{"at the limit", bytes.Repeat([]byte("a"), maxSize), ""},
		{"past the limit", bytes.Repeat([]byte("a"), maxSize+1), "more than"},
	} {
		err := checkFile(tt.name, tt.data)
		switch {
		case tt.problem == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.problem != "" && (err == nil || !strings.Contains(err.Error(), tt.problem)):
			t.Errorf("%s: got %v, want a problem saying %q", tt.name, err, tt.problem)
		}
	}
}
