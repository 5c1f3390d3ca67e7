package keepalived_test

import (
	"bufio"
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/keepalived"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// goldenCase is testdata/<name>.env: KEY=VALUE lines as a Deployment sets
// them, one NODE line, "NODE=<interface> <IPv4 or -> [<IPv6>]", for the
// facts the program finds on the host, and with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods a MEMBERS line, the addresses the
// other pods publish (none: the pod is alone).
type goldenCase struct {
	name string
	env  map[string]string
	node config.Node
}

func loadCases(t testing.TB) []goldenCase {
	t.Helper()
	files, err := filepath.Glob("testdata/*.env")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	var out []goldenCase
	for _, f := range files {
		c := goldenCase{name: strings.TrimSuffix(filepath.Base(f), ".env"), env: map[string]string{}}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			if !ok {
				continue
			}
			if k == "MEMBERS" {
				for _, m := range strings.Fields(v) {
					c.node.Members = append(c.node.Members, netip.MustParseAddr(m))
				}
				continue
			}
			if k != "NODE" {
				c.env[k] = v
				continue
			}
			f := strings.Fields(v)
			c.node.Interface = f[0]
			if len(f) > 1 && f[1] != "-" {
				c.node.Addr4 = netip.MustParseAddr(f[1])
			}
			if len(f) > 2 {
				c.node.Addr6 = netip.MustParseAddr(f[2])
			}
		}
		out = append(out, c)
	}
	return out
}

// render goes the whole way a user's settings go: the process environment,
// envconfig, validation, instances, template.
func (c goldenCase) render(t *testing.T) []byte {
	out, _, _ := c.renderWith(t)
	return out
}

// renderWith renders the case and returns the configuration and instances
// too.
func (c goldenCase) renderWith(t *testing.T) ([]byte, *config.Config, []config.Instance) {
	t.Helper()
	for _, name := range config.Variables() {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	for k, v := range c.env {
		t.Setenv(k, v)
	}
	raw, err := config.FromEnv()
	if err != nil {
		t.Fatalf("environment: %v", err)
	}
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ins, err := cfg.Instances(c.node)
	if err != nil {
		t.Fatalf("instances: %v", err)
	}
	out, err := keepalived.Render(cfg, c.node, ins)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out, cfg, ins
}

func TestGolden(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got := c.render(t)
			golden := filepath.Join("testdata", c.name+".conf.golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/keepalived -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("keepalived.conf differs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseReadsWhatRenderWrote: reading every golden case back gives the
// instances (with their unicast peers), intervals and VRRP version it was
// rendered from.
func TestParseReadsWhatRenderWrote(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			text, cfg, ins := c.renderWith(t)
			got, err := keepalived.Parse(text)
			if err != nil {
				t.Fatal(err)
			}
			interval, v3 := cfg.Adverts()
			want := &keepalived.Conf{AdvertInt: interval, V3: v3}
			if cfg.Check == config.CheckPort {
				want.CheckFile = keepalived.CheckFile
			} else {
				want.CheckInterval = cfg.CheckInterval
			}
			for _, in := range ins {
				want.Instances = append(want.Instances, keepalived.ConfInstance{
					Name: in.Name, RouterID: int(in.RouterID), Priority: in.Priority, Master: in.Master, VIPs: in.VIPs,
					UnicastPeers: in.UnicastPeers,
				})
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("Parse(Render(%s)) (-want +got):\n%s", c.name, diff)
			}
		})
	}
}

func TestRenderRefusesStructureBreakingValues(t *testing.T) {
	cfg, err := config.Parse(config.Raw{VirtualIPs: "192.0.2.100"})
	if err != nil {
		t.Fatal(err)
	}
	node := config.Node{Interface: "eth0", Addr4: netip.MustParseAddr("192.0.2.11")}
	ins, err := cfg.Instances(node)
	if err != nil {
		t.Fatal(err)
	}
	// Values that config would refuse, set directly: the renderer must
	// refuse them too rather than write a file with a changed structure.
	for name, mutate := range map[string]func(c *config.Config, ins []config.Instance){
		"auth_pass with a brace":   func(c *config.Config, _ []config.Instance) { c.Name = "x}\nvrrp_instance evil {" },
		"notify with a quote":      func(c *config.Config, _ []config.Instance) { c.NotifyScript = `/x" ; rm -rf /` },
		"interface with a newline": func(_ *config.Config, ins []config.Instance) { ins[0].Interface = "eth0\n}" },
		"e-mail with a comment":    func(c *config.Config, _ []config.Instance) { c.AdminEmails = []string{"a@b #"} },
		"check script with newline": func(c *config.Config, _ []config.Instance) {
			c.Check, c.CheckScript = config.CheckScript, "/bin/true\n}"
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := *cfg
			in := append([]config.Instance(nil), ins...)
			mutate(&c, in)
			if out, err := keepalived.Render(&c, node, in); err == nil {
				t.Errorf("rendered without error:\n%s", out)
			}
		})
	}
}

func TestAdvertInt(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want string
	}{
		{name: "whole", in: "2", want: "2"},
		{name: "tenth", in: "0.1", want: "0.1"},
		{name: "hundredths", in: "0.25", want: "0.25"},
		{name: "above one", in: "1.5", want: "1.5"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse(config.Raw{VirtualIPs: "192.0.2.1", AdvertInterval: tt.in})
			if err != nil {
				t.Fatal(err)
			}
			if got := keepalived.AdvertInt(c.AdvertInterval); got != tt.want {
				t.Errorf("AdvertInt(%s) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
