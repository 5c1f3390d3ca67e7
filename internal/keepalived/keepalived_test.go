package keepalived_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipfailover/ipfailover/test/nstest"
)

// TestKeepalivedAcceptsGolden runs the real keepalived's config test on
// every golden file, in a network namespace whose veth has the interface
// name and addresses of the case: keepalived checks that they exist.
func TestKeepalivedAcceptsGolden(t *testing.T) {
	requireKeepalived(t)
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			golden := filepath.Join("testdata", c.name+".conf.golden")
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			ns := newNamespace(t, c.node.Interface, c.node.Addr4.String(), c.node.Addr6.String())
			keepalivedTest(t, ns, withScripts(t, string(b)))
		})
	}
}

// requireKeepalived skips unless the test can make namespaces and run
// keepalived.
func requireKeepalived(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("keepalived is not installed (apt-get install keepalived)")
	}
}

// newNamespace makes a network namespace with a veth named iface carrying
// the given addresses ("invalid IP" strings are skipped), and removes it
// when the test ends.
func newNamespace(t testing.TB, iface string, addrs ...string) string {
	t.Helper()
	ns := nstest.New(t, "ipf-conf")
	nstest.Veth(t, ns, iface, "peer0")
	for _, a := range addrs {
		switch {
		case strings.Contains(a, "invalid"):
		case strings.Contains(a, ":"):
			nstest.IP(t, ns, "addr", "add", a+"/64", "dev", iface, "nodad")
		default:
			nstest.IP(t, ns, "addr", "add", a+"/24", "dev", iface)
		}
	}
	return ns
}

// withScripts points the user scripts a case names (which live in the
// pod's file system, e.g. /etc/keepalive) at executables in a temporary
// directory, so keepalived finds them.
func withScripts(t testing.TB, text string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{"/etc/keepalive/"} {
		if !strings.Contains(text, p) {
			continue
		}
		for _, line := range strings.Split(text, "\n") {
			i := strings.Index(line, p)
			if i < 0 {
				continue
			}
			name := strings.Fields(strings.Trim(line[i+len(p):], `"`))[0]
			name = strings.TrimSuffix(name, `"`)
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		text = strings.ReplaceAll(text, p, dir+"/")
	}
	return text
}

// keepalivedTest runs `keepalived -t` on text inside ns. Exit 0 is a clean
// config. keepalived exits 5 for a notice and 6 for a script security
// notice (scripts run as root, as in the shipped image), and reports only
// the worst kind: a security notice hides any other. So every line it
// prints must be one of the notices below, which the shipped image's
// configuration gets too; any other line, or another exit code, fails.
func keepalivedTest(t testing.TB, ns, text string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "keepalived.conf")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "keepalived", "-t", "-l", "-f", f).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !slices.ContainsFunc(knownNotices, func(n string) bool { return strings.Contains(line, n) }) {
			unknown = append(unknown, line)
		}
	}
	if code != 0 && code != 5 && code != 6 || len(unknown) > 0 {
		t.Errorf("keepalived -t exit %d, unexpected lines %q:\n%s\nconfig:\n%s", code, unknown, out, text)
	}
}

// knownNotices are what keepalived -t says about a valid configuration.
var knownNotices = []string{
	// auth_pass is OPENSHIFT_HA_CONFIG_NAME; VRRP keeps 8 characters.
	"Truncating auth_pass to 8 characters",
	// IPv6 instances run VRRPv3, which has no authentication.
	"VRRP version 3 does not support authentication. Ignoring.",
	// Documented in docs/concepts.md (Priorities).
	"preempt delay will not work with initial state MASTER - clearing",
	// keepalived resolves a named smtp_server at once; the test
	// namespace has no DNS.
	"Invalid smtp server smtp.example.com",
	// Scripts run as root (script_user root), as in the shipped image.
	"SECURITY VIOLATION - scripts are being executed but script_security not enabled",
}
