// Package e2e runs the real ipfailover binary with the real keepalived in
// each node of a 3-node lab cluster (network, PID and mount namespaces) and
// proves the failover behaviour of the contract: one holder per VIP,
// handovers on a failed check, SIGTERM and crash, the firewall rule, the
// supervisor, remove-failover, unicast and a fleet mixed with the shipped
// image's keepalived configuration.
//
// The tests need root; without it they skip. They build the binary once, in
// TestMain, into /var/tmp (a node's /tmp is a private tmpfs).
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Built once by TestMain; empty when the suite skips.
var (
	ipfailoverBin string
	httpdBin      string
	skipReason    string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	switch {
	case os.Geteuid() != 0:
		skipReason = "e2e builds network, PID and mount namespaces: needs root"
	case !onPath("keepalived", "iptables", "ip6tables", "nsenter", "ip"):
		skipReason = "e2e needs keepalived, iptables, ip6tables, nsenter and ip on PATH"
	}
	if skipReason != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("/var/tmp", "ipfailover-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

func onPath(names ...string) bool {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return false
		}
	}
	return true
}

// build compiles the program and the test HTTP server from the module root.
func build(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	ipfailoverBin = filepath.Join(dir, "ipfailover")
	httpdBin = filepath.Join(dir, "httpd")
	for bin, pkg := range map[string]string{ipfailoverBin: "./cmd/ipfailover", httpdBin: "./test/e2e/testdata/httpd"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

func needRoot(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
