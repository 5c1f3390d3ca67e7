package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestLimitCores: a cgroup and the one below it run on the last core of
// their parent's CPUs after limitCores(1), on all of them again after
// limitCores(0); a limit beyond the CPUs there are, or below 0, is
// refused with what is wrong.
func TestLimitCores(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes cgroups")
	}
	parent := fmt.Sprintf("/ipfk-test-cores-%d", os.Getpid())
	path := parent + "/machine"
	if err := makeCgroup(path + "/pod"); errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		// A container whose cgroup hierarchies are mounted read-only.
		t.Skipf("cannot make a cgroup here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeCgroup(parent); err != nil {
			t.Error(err)
		}
	})
	hs, err := hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	// cpus reads the CPU list of p in the hierarchy that has cpuset.cpus
	// there (v2: the effective one).
	cpus := func(p string) []int {
		t.Helper()
		for _, h := range hs {
			for _, f := range []string{"cpuset.cpus.effective", "cpuset.cpus"} {
				if h == unified(hs) && f == "cpuset.cpus" {
					continue
				}
				b, err := os.ReadFile(filepath.Join(h, p, f))
				if err != nil {
					continue
				}
				l, err := parseCPUList(string(b))
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
		}
		t.Skip("no cpuset controller in the cgroup hierarchies")
		return nil
	}
	all := cpus(parent)
	if err := limitCores(path, 1); err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1:]
	for _, p := range []string{path, path + "/pod"} {
		if got := cpus(p); !slices.Equal(got, last) {
			t.Errorf("after limitCores(1): %s on CPUs %v, want %v", p, got, last)
		}
	}
	if err := limitCores(path, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "/pod"} {
		if got := cpus(p); !slices.Equal(got, all) {
			t.Errorf("after limitCores(0): %s on CPUs %v, want %v", p, got, all)
		}
	}
	for n, want := range map[int]string{-1: "-1 cores", len(all) + 1: fmt.Sprintf("has %d", len(all))} {
		if err := limitCores(path, n); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("limitCores(%d) = %v, want an error with %q", n, err, want)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "0-1\n": {0, 1}, "0-2,5,7-8": {0, 1, 2, 5, 7, 8}} {
		if got, err := parseCPUList(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "1-x"} {
		if _, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q): no error", in)
		}
	}
}
