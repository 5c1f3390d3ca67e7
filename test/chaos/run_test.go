package chaos

import (
	"bytes"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
	"github.com/ipfailover/ipfailover/test/syncbuf"
)

func TestMain(m *testing.M) {
	// The nodes' service is this test binary, run as "serve".
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(lab.ServeName(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// ciSeed draws, in 75 s, nine faults of nine kinds: the starvation of
// node2's CPU first, for 12 s (held to no handover; the partition that
// overlaps it is between the other two), both partitions, a freeze, a
// lossy and slow segment, the death of node2 for more than 4 s (so the
// check that no client follows a dead node's kernel applies), a service
// stop, an address storm and ipfailover stopped (SIGTERM).
const ciSeed = 91110

// TestShortRun is the short mixed run CI makes: the real ipfailover and
// keepalived on the lab under seed ciSeed's faults for 75 s. It holds the
// invariants (every VIP on one node and answering the client from it at
// the end, nothing stray, metrics agreeing, a clean shutdown), that the
// nemesis carried out every fault and the observation lost nothing, and
// that the report and pictures are written. The timing limits are logged,
// not held: they are measured by make chaos and make bench, where the
// machine is not shared with the rest of the tests.
func TestShortRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab builds network namespaces: needs root")
	}
	for _, p := range []string{"keepalived", "nft", "iptables", "ip6tables", "nsenter", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed", p)
		}
	}
	dir, err := os.MkdirTemp("/var/tmp", "ipfailover-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "ipfailover")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/ipfailover/ipfailover/cmd/ipfailover").CombinedOutput(); err != nil {
		t.Fatalf("building ipfailover: %v\n%s", err, out)
	}
	self := filepath.Join(dir, "chaos")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(self, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out := t.TempDir()
	var progress strings.Builder
	var logs syncbuf.Buffer // the lab's warnings
	res, err := Run(ctx, Options{Seed: ciSeed, Duration: 75 * time.Second, Binary: bin, Self: self, Out: out, Progress: &progress, Log: &logs, Commit: "test"})
	t.Log("\n" + logs.String() + progress.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Checks {
		if !c.OK {
			t.Errorf("invariant: %s: %s", c.Name, c.Detail)
		}
	}
	for _, pr := range res.Problems {
		t.Errorf("problem: %s", pr)
	}
	// Every node's programs' output is kept with the report, -v or not.
	for _, name := range res.Data.Nodes {
		b, err := os.ReadFile(filepath.Join(out, "logs", name+".log"))
		if err != nil || !bytes.Contains(b, []byte("effective configuration")) || !bytes.Contains(b, []byte("Entering")) {
			t.Errorf("%s's log kept with the report: %d bytes, %v; want ipfailover's and keepalived's lines", name, len(b), err)
		}
	}
	if got, want := len(res.Data.Records), len(res.Schedule.Faults); got != want || want < 7 {
		t.Errorf("%d faults carried out of %d planned, want all of at least 7", got, want)
	}
	for _, v := range res.Analysis.Violations {
		t.Logf("limit (measured by make chaos, not held here): %s", v.String(res.Data))
	}
	// The VIPs of a dead node answer from another node before the dead one
	// comes back (3 advert intervals after it died, against a death of 4 s
	// or more): its kernel, which still has them, must not keep the clients.
	for ri, rec := range res.Data.Records {
		if rec.Kind != NodeDeath || rec.Ended.Sub(rec.Began) < 4*time.Second {
			continue
		}
		for vi, r := range res.Analysis.VIPs {
			if !slices.Contains(rec.Held, res.Data.VIPs[vi]) {
				continue
			}
			for oi, o := range r.Outages {
				if r.Charges[oi].Record == ri && o.Start.Before(rec.Ended) && !o.End.Before(rec.Ended) {
					t.Errorf("%s: out from %s until %s, after %s came back (%s): its clients waited for the dead node",
						r.VIP, o.Start.Sub(res.Data.Start), o.End.Sub(res.Data.Start), res.Data.Nodes[rec.Nodes[0]], rec.Ended.Sub(res.Data.Start))
				}
			}
		}
	}
	// A client sent to a node without the VIP for a second is a client
	// left behind, however slow the machine: every node that takes a VIP
	// announces it, and the guards announce it again after a split brain.
	for _, r := range res.Analysis.VIPs {
		for _, o := range r.Outages {
			if o.Stranded != "" && o.Len() > time.Second {
				t.Errorf("%s: out %s from %s, the client sending to %s, which did not hold it", r.VIP, o.Len(), o.Start.Sub(res.Data.Start), o.Stranded)
			}
		}
	}
	// Each fault began with the nodes' advert interval read from their
	// configurations (the lab's: keepalived's 1 s), and the run's is known.
	for _, r := range res.Data.Records {
		if !r.Began.IsZero() && r.Advert != time.Second {
			t.Errorf("fault #%d (%s): advert interval %s, want the nodes' 1s", r.Index, r.Kind, r.Advert)
		}
	}
	if res.Data.Advert != time.Second {
		t.Errorf("the run's advert interval %s, want 1s", res.Data.Advert)
	}
	for _, r := range res.Analysis.VIPs {
		t.Logf("%s: available %.3f%%, %d outages, on two nodes %s", r.VIP, r.Availability*100, len(r.Outages), r.Twice)
		if r.Probes < 5000 {
			t.Errorf("%s: %d probes in 75 s, want at least 5000 (one every 10 ms)", r.VIP, r.Probes)
		}
	}
	report, err := os.ReadFile(res.Report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("# Chaos run: seed %d", ciSeed), "## Per fault kind", "| node-death |", "## Invariants at the end"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if len(res.Pictures) != len(res.Data.VIPs) {
		t.Fatalf("%d pictures for %d VIPs", len(res.Pictures), len(res.Data.VIPs))
	}
	for _, pic := range res.Pictures {
		f, err := os.Open(pic)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", pic, err)
		}
		f.Close()
	}
	// The recording judges the same again.
	again, err := Reanalyse(out, t.TempDir())
	if err != nil {
		t.Fatalf("Reanalyse: %v", err)
	}
	// The run's times carry monotonic clock readings, the recording's the
	// wall clock alone: the two drift apart while the clock is slewed (57 µs
	// in one run of 75 s).
	near := cmp.Options{
		cmpopts.EquateApproxTime(time.Millisecond),
		cmp.Comparer(func(a, b time.Duration) bool { return (a - b).Abs() < time.Millisecond }),
		cmpopts.EquateApprox(0, 1e-4),
	}
	if diff := cmp.Diff(res.Analysis, again.Analysis, addrCmp, near); diff != "" {
		t.Errorf("the recording judged again differs (-run +again):\n%s", diff)
	}
	if len(again.Checks) != len(res.Checks) || again.Schedule.Seed != ciSeed {
		t.Errorf("the recording has %d checks of seed %d, want %d of %d", len(again.Checks), again.Schedule.Seed, len(res.Checks), ciSeed)
	}
}

// TestLabNeedsPrograms: a lab target on a machine without the nodes'
// programs fails before it builds anything, naming the first missing one.
func TestLabNeedsPrograms(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := newLabTarget(context.Background(), Options{})
	if err == nil || !strings.Contains(err.Error(), "keepalived is not installed") {
		t.Fatalf("got %v, want keepalived named as missing", err)
	}
}
