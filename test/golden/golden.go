// Package golden holds a rendered file to its committed copy: a test
// renders the file from the code and compares; `go test PKG -update`
// rewrites the copy instead, to be reviewed in the diff like code.
package golden

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files and the generated documents")

// Compare returns nil when the file at path holds got, or an error that
// names the file, shows the difference and says which command rewrites it.
func Compare(path string, got []byte, regenerate string) error {
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist: run %s", path, regenerate)
	}
	if err != nil {
		return err
	}
	if string(want) == string(got) {
		return nil
	}
	return fmt.Errorf("%s is not what the code renders; run %s and review the diff (-committed +rendered):\n%s",
		path, regenerate, cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")))
}

// Check compares got with the file at path, or with -update writes it
// there.
func Check(t testing.TB, path string, got []byte, regenerate string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	if err := Compare(path, got, regenerate); err != nil {
		t.Error(err)
	}
}
