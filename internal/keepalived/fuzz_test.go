package keepalived_test

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// FuzzRender: whatever config accepts renders, every line of the result
// keeps the file's structure (braces balance, no stray quotes), and where
// keepalived is installed and the test runs as root, keepalived accepts it.
func FuzzRender(f *testing.F) {
	f.Add("OpenShift-IPFailover", "192.0.2.1-3", "0", "/etc/keepalive/check.sh", "/etc/keepalive/notify.sh", "192.0.2.11,192.0.2.12", "ops@example.com", "nopreempt")
	f.Add("ha-1", "2001:db8::1f39-1f3b", "2", "", "", "", "a@b c@d", "preempt_delay 1")
	f.Add("x}", "192.0.2.1", "1", "/x\" y", "/n\n}", "", "root@localhost #", "")
	var ns string // where keepalived checks the result, when it can
	if os.Geteuid() == 0 && exec.Command("keepalived", "--version").Run() == nil {
		ns = newNamespace(f, "eth0", "192.0.2.11", "2001:db8::11")
	}
	f.Fuzz(func(t *testing.T, name, vips, groups, check, notify, peers, emails, preempt string) {
		c, err := config.Parse(config.Raw{ConfigName: name, VirtualIPs: vips, VIPGroups: groups, CheckScript: check,
			NotifyScript: notify, UnicastPeers: peers, AdminEmails: emails, Preemption: preempt})
		if err != nil {
			return
		}
		node := config.Node{Interface: "eth0", Addr4: netip.MustParseAddr("192.0.2.11"), Addr6: netip.MustParseAddr("2001:db8::11")}
		ins, err := c.Instances(node)
		if err != nil {
			return
		}
		out, err := keepalived.Render(c, node, ins)
		if err != nil {
			t.Fatalf("config accepted what the renderer refuses: %v", err)
		}
		text := string(out)
		if strings.Count(text, "{") != strings.Count(text, "}") {
			t.Fatalf("braces do not balance:\n%s", text)
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.Count(line, `"`)%2 != 0 {
				t.Fatalf("unbalanced quote in %q", line)
			}
		}
		if ns == "" {
			return
		}
		keepalivedTest(t, ns, withScriptsAnywhere(t, text, c))
	})
}

// withScriptsAnywhere makes the scripts a fuzzed config names exist, in a
// temporary directory, by rewriting their paths.
func withScriptsAnywhere(t *testing.T, text string, c *config.Config) string {
	dir := t.TempDir()
	for _, s := range []string{c.CheckScript, c.NotifyScript} {
		if s == "" {
			continue
		}
		path := strings.Fields(s)[0]
		stand := dir + "/" + strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "_")
		if err := os.WriteFile(stand, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		text = strings.ReplaceAll(text, `"`+path, `"`+stand)
	}
	return text
}
