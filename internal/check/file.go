package check

import (
	"fmt"
	"os"
	"path/filepath"
)

// File reports the check's state in the file keepalived's track_file
// watches ("weight 0 reverse"): 1 when the check passes, 0 when it fails.
// keepalived reads 0, an empty file and a missing one alike as FAULT.
type File struct {
	path string
}

// NewFile makes the file's directory and writes 0 to it: keepalived starts
// with the check failing until the first probes pass, as it does with a
// vrrp_script.
func NewFile(path string) (*File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("making the directory of %s: %w", path, err)
	}
	f := &File{path: path}
	if err := f.Report(false); err != nil {
		return nil, err
	}
	return f, nil
}

// Report writes the state beside the file and renames it over the file, so
// keepalived, woken by the rename, reads a whole value.
func (f *File) Report(passing bool) error {
	v := "0\n"
	if passing {
		v = "1\n"
	}
	tmp := f.path + ".new"
	if err := os.WriteFile(tmp, []byte(v), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return nil
}
