package lab

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCPUShares: the kubelet's conversions of a CPU request.
func TestCPUShares(t *testing.T) {
	for _, tc := range []struct{ milli, shares, weight int }{
		{1, 2, 1},
		{100, 102, 4},
		{1000, 1024, 39},
		{1900, 1945, 75},
		{2000, 2048, 79},
	} {
		if got := CPUShares(tc.milli); got != tc.shares {
			t.Errorf("CPUShares(%dm) = %d, want %d", tc.milli, got, tc.shares)
		}
		if got := CPUWeight(tc.milli); got != tc.weight {
			t.Errorf("CPUWeight(%dm) = %d, want %d", tc.milli, got, tc.weight)
		}
	}
}

// TestBurn: the burner's every process runs in its group, each loop busy,
// and Kill ends them all, so the group can be removed.
func TestBurn(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := "ipfailover-lab-test-" + c.Name
	g := testCPUGroup(t, path, "burner", 1900)
	n := c.Nodes[0]
	p, err := n.Burn(ctx, 2, g)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := p.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Errorf("the burner runs %d processes, want the shell and 2 loops: %+v", len(ps), ps)
	}
	time.Sleep(200 * time.Millisecond)
	for _, q := range ps {
		if in, err := g.Has(q.Pid); err != nil || !in {
			t.Errorf("pid %d is not in %s (%v)", q.Pid, g.Path, err)
		}
		st, err := os.ReadFile("/proc/" + strconv.Itoa(q.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// utime is the 14th field; the command name (2nd) has no space.
		if f := strings.Fields(string(st)); q.Pid != p.Pid && f[13] == "0" {
			t.Errorf("loop %d has not run: %s", q.Pid, st)
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := RemoveCPUGroup(path); err != nil {
		t.Fatalf("removing the group after the burner: %v", err)
	}
}

// testCPUGroup creates the group path/name with the share of milli
// millicores; the test's cleanup removes path.
func testCPUGroup(t *testing.T, path, name string, milli int) *CPUGroup {
	t.Helper()
	t.Cleanup(func() {
		if err := RemoveCPUGroup(path); err != nil {
			t.Error(err)
		}
	})
	g, err := NewCPUGroup(path+"/"+name, milli)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
