package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestSIGHUPReloads: SIGHUP re-renders keepalived.conf and reloads the same
// keepalived; it neither stops keepalived nor moves a VIP.
func TestSIGHUPReloads(t *testing.T) {
	s := newScenario(t)
	f := s.fleet(env(vips4Env), vips4)
	n := f.Holders[vips4[0]]
	p := f.Proc(n)
	i := 0
	for j, q := range f.Procs {
		if q == p {
			i = j
		}
	}
	out := f.Outputs[i]

	pid := func() string {
		b, err := p.ReadFile("/run/keepalived.pid")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	before := pid()
	// A marker in the old file shows the file was written again.
	if _, err := p.Exec(s.ctx, "sh", "-c", "echo '! stale' >> /etc/keepalived/keepalived.conf"); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.waitFor(fmt.Sprintf("reload %d logged by ipfailover and keepalived", round), func() (bool, error) {
			if p.Exited() {
				return false, fmt.Errorf("ipfailover exited on SIGHUP")
			}
			return out.Count("reloaded keepalived") >= round && out.Count("Reloading") >= round, nil
		})
	}
	if after := pid(); after != before {
		t.Errorf("keepalived pid %s became %s: SIGHUP restarted it", before, after)
	}
	conf, err := p.ReadFile("/etc/keepalived/keepalived.conf")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf), "! stale") {
		t.Error("keepalived.conf was not re-rendered")
	}
	m := s.waitOne(vips4, nil)
	for _, v := range vips4 {
		if m[v] != f.Holders[v] {
			t.Errorf("%s moved from %s to %s on reload", v, f.Holders[v].Name, m[v].Name)
		}
	}
}
