package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLimitCPU: a cgroup's CFS bandwidth follows limitCPU (half a core is
// half of each period; 0 lifts it), in whichever hierarchy has the cpu
// controller; a negative limit is refused.
func TestLimitCPU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a cgroup")
	}
	path := fmt.Sprintf("/ipfk-test-limit-%d", os.Getpid())
	if err := makeCgroup(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeCgroup(path); err != nil {
			t.Error(err)
		}
	})
	// quota reads the limit back as a share of a period (-1: none).
	quota := func() float64 {
		t.Helper()
		hs, err := hierarchies()
		if err != nil {
			t.Fatal(err)
		}
		if u := unified(hs); u != "" {
			if b, err := os.ReadFile(filepath.Join(u, path, "cpu.max")); err == nil {
				f := strings.Fields(string(b))
				if f[0] == "max" {
					return -1
				}
				q, _ := strconv.Atoi(f[0])
				p, _ := strconv.Atoi(f[1])
				return float64(q) / float64(p)
			}
		}
		for _, h := range hs {
			p, err := os.ReadFile(filepath.Join(h, path, "cpu.cfs_period_us"))
			if err != nil {
				continue
			}
			q, err := os.ReadFile(filepath.Join(h, path, "cpu.cfs_quota_us"))
			if err != nil {
				t.Fatal(err)
			}
			qi, _ := strconv.Atoi(strings.TrimSpace(string(q)))
			if qi < 0 {
				return -1
			}
			pi, _ := strconv.Atoi(strings.TrimSpace(string(p)))
			return float64(qi) / float64(pi)
		}
		t.Fatal("no cpu controller found")
		return 0
	}
	if got := quota(); got != -1 {
		t.Fatalf("a new cgroup's limit: %v cores, want none", got)
	}
	if err := limitCPU(path, 500); err != nil {
		t.Fatal(err)
	}
	if got := quota(); got != 0.5 {
		t.Errorf("after limitCPU(500): %v cores, want 0.5", got)
	}
	if err := limitCPU(path, 0); err != nil {
		t.Fatal(err)
	}
	if got := quota(); got != -1 {
		t.Errorf("after limitCPU(0): %v cores, want none", got)
	}
	if err := limitCPU(path, -1); err == nil || !strings.Contains(err.Error(), "-1m") {
		t.Errorf("limitCPU(-1) = %v, want an error naming -1m", err)
	}
}
