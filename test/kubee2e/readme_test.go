package kubee2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

// quickStartBlock is one shell block of the README's quick start.
type quickStartBlock struct {
	// where is "" (the admin's machine, in the clone), "node" (every
	// node: "# on every node") or "client" ("# from a client").
	where string
	text  string
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// quickStart reads the shell blocks of README.md's "Quick start" section,
// dedented, in order.
func quickStart(t *testing.T) []quickStartBlock {
	t.Helper()
	root, err := kube.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Quick start\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var out []quickStartBlock
	for _, m := range shBlock.FindAllStringSubmatch(section, -1) {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(m[1], " \n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, "   "))
		}
		blk := quickStartBlock{text: strings.Join(lines, "\n") + "\n"}
		switch strings.TrimSpace(lines[0]) {
		case "# on every node":
			blk.where = "node"
		case "# from a client":
			blk.where = "client"
		}
		out = append(out, blk)
	}
	if len(out) == 0 {
		t.Fatal("no shell block in the README's quick start: the scan is broken")
	}
	return out
}

// TestReadmeQuickStart runs the README's quick start as written, its
// placeholders filled, on the test cluster: the image build is make
// kube-up's (the image is imported on every node), the overlay is written
// in a copy of the clone, "# on every node" blocks run on every node and
// "# from a client" ones on the lab's client, the rest with kubectl. The
// service answers on 8080, not 80. Every block must succeed, and every VIP
// must then answer a client, again after the holder's pod was deleted.
func TestReadmeQuickStart(t *testing.T) {
	c := need(t)
	keepLogs(t, c)
	ctx := testContext(t, 10*time.Minute)
	since := time.Now()
	for _, n := range c.Nodes {
		s, err := lab.ServeNameIn(n.Lab().Netns, fmt.Sprintf("0.0.0.0:%d", monitorPort), n.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
	}
	root, err := kube.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	clone := t.TempDir()
	if err := os.CopyFS(filepath.Join(clone, "deploy"), os.DirFS(filepath.Join(root, "deploy"))); err != nil {
		t.Fatal(err)
	}
	name, tag, _ := strings.Cut(image, ":")
	fill := strings.NewReplacer("<your-registry>/ipfailover", name, "<tag>", tag)
	env := append(os.Environ(), "KUBECONFIG="+c.State().Kubeconfig, "PATH="+c.State().Bin+":"+os.Getenv("PATH"))
	var ruled []*kube.Machine
	t.Cleanup(func() {
		cmd := exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(c.State().Bin, "kubectl"), "delete", "-k", "my-failover", "--wait=true", "--timeout=2m")
		cmd.Dir, cmd.Env = clone, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("kubectl delete -k my-failover: %v\n%s", err, out)
		}
		for _, m := range ruled {
			if _, err := m.Lab().Exec(context.WithoutCancel(ctx), "iptables", "-D", "INPUT", "-p", "vrrp", "-j", "ACCEPT"); err != nil {
				t.Error(err)
			}
		}
	})
	var holder string
	for i, b := range quickStart(t) {
		text := fill.Replace(b.text)
		switch {
		case strings.Contains(text, "make image"):
			t.Logf("block %d: the image is make kube-up's, imported on every node: skipped", i+1)
			continue
		case b.where == "node":
			for _, m := range c.Nodes {
				if out, err := m.Lab().Exec(ctx, "bash", "-euo", "pipefail", "-c", text); err != nil {
					t.Fatalf("block %d on %s: %v\n%s", i+1, m.Name, err, out)
				}
				ruled = append(ruled, m)
			}
			continue
		case b.where == "client":
			out, err := c.Lab().Client.Exec(ctx, "bash", "-euo", "pipefail", "-c", text)
			if err != nil {
				t.Fatalf("block %d on the client: %v\n%s", i+1, err, out)
			}
			t.Logf("block %d on the client:\n%s%s", i+1, text, out)
			// The answer is the last line: curl writes its progress
			// meter to stderr when stdout is not a terminal.
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if holder = strings.TrimSpace(lines[len(lines)-1]); !strings.HasPrefix(holder, "node") {
				t.Errorf("block %d: the client got %q, want a node's name", i+1, out)
			}
			continue
		}
		// The status of a fleet that just rolled out: the pods hear
		// each other within a few heartbeats. Tried again as a user
		// would, for a while.
		deadline := time.Now().Add(30 * time.Second)
		for {
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", text)
			cmd.Dir, cmd.Env = clone, env
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Logf("block %d:\n%s%s", i+1, text, out)
				break
			}
			if !strings.HasPrefix(strings.TrimSpace(text), "kubectl -n ipfailover exec deploy/ipfailover -- ipfailover status") || time.Now().After(deadline) {
				t.Fatalf("block %d: %v\n%s%s", i+1, err, text, out)
			}
			time.Sleep(2 * time.Second)
		}
	}
	if holder == "" {
		t.Fatal("no client block asked a VIP")
	}
	// The last block deleted the holder of 192.0.2.100: another node
	// answers, and so does every VIP.
	vip := netip.MustParseAddr("192.0.2.100")
	if err := answeredByOtherThan(ctx, c, vip, holder); err != nil {
		t.Fatal(err)
	}
	if err := c.RolloutStatus(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	for _, v := range vips {
		if err := answeredByOtherThan(ctx, c, v, ""); err != nil {
			t.Error(err)
		}
	}
	checkEvents(ctx, t, c, since)
}

// answeredByOtherThan waits until an HTTP request to vip's service, from
// the lab's client, is answered by a node other than not ("": any).
func answeredByOtherThan(ctx context.Context, c *kube.Cluster, vip netip.Addr, not string) error {
	url := fmt.Sprintf("http://%s:%d/", vip, monitorPort)
	var last string
	for range 100 {
		body, err := c.Lab().Get(ctx, url)
		switch {
		case err != nil:
			last = err.Error()
		case strings.TrimSpace(body) != not:
			return nil
		default:
			last = "answered by " + not
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s", url, last)
}
