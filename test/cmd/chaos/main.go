// Command chaos runs ipfailover under a seeded nemesis and reports what a
// client saw: it builds ./cmd/ipfailover, starts it with the real
// keepalived on a three-node lab of network namespaces, draws a schedule of
// faults from the seed (services stopped, keepalived killed, ipfailover
// stopped, nodes killed, frozen and cut off, VRRP partitions, a lossy and
// slow segment, rollouts; one at a time and overlapping), injects them
// while a client probes every VIP every 10 ms, and writes a Markdown report
// and a PNG timeline per VIP. It exits 1 when a limit or an invariant is
// broken.
//
// Usage, as root from the repository:
//
//	go run ./test/cmd/chaos [-seed N] [-duration 3m] [-advert-interval 0.1] [-out DIR] [-v]
//	go run ./test/cmd/chaos -target kube [-kube-bin bin/kube] [-image REF] ...
//
// With -target kube it brings up the real three-node Kubernetes of
// test/kube in out/chaos-kube, installs deploy/overlays/kubernetes with the
// image, adds the cluster's own faults (pods deleted, drains, rollouts, a
// config change rolled out, the API server stopped) and removes the
// cluster at the end.
//
// The same seed draws the same schedule. The program also runs, copied
// next to ipfailover, as each node's checked service ("chaos serve"),
// which answers HTTP requests with the node's name.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/chaos"
	"github.com/ipfailover/ipfailover/test/lab"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(lab.ServeName(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	seedFlag := flag.String("seed", "", "seed of the schedule (default: a random one, printed)")
	duration := flag.Duration("duration", 3*time.Minute, "length of the run, the settling tail included")
	advert := flag.String("advert-interval", "", "OPENSHIFT_HA_ADVERT_INTERVAL of the fleet (default: unset, 1 s)")
	out := flag.String("out", "", "directory for the report and the pictures (default out/chaos/seed-N)")
	verbose := flag.Bool("v", false, "log the lab's steps and copy every node's output to stderr")
	target := flag.String("target", "lab", "where to run: lab (network namespaces) or kube (a real three-node Kubernetes, test/kube)")
	kubeBin := flag.String("kube-bin", "bin/kube", "with -target kube: the Kubernetes binaries (make kube-bins)")
	image := flag.String("image", "localhost/ipfailover:dev", "with -target kube: the ipfailover image (make image), imported into every node")
	other := flag.String("binary", "", "run this ipfailover binary instead of building ./cmd/ipfailover (another build, to compare)")
	cpuProfile := flag.String("cpuprofile", "", "write this program's CPU profile (go tool pprof) to this file: what the harness itself costs the machine")
	reanalyse := flag.String("reanalyse", "", "judge the run recorded in this directory again (its recording.json.gz) with this build's analysis, writing the report into -out (default: that directory); runs nothing")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: chaos [flags]\n\nRuns ipfailover on a three-node lab under a seeded nemesis and reports the outages a client saw. Needs root.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	if *reanalyse != "" {
		if *out == "" {
			*out = *reanalyse
		}
		res, err := chaos.Reanalyse(*reanalyse, *out)
		if res == nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
		return finish(res, err, res.Schedule.Seed)
	}
	seed, err := parseSeed(*seedFlag)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: -seed %q: %v\n", *seedFlag, err)
		return 2
	}
	if *duration < time.Minute {
		fmt.Fprintf(os.Stderr, "chaos: -duration %s: must be at least 1m (the first fault comes after 5 s, the last 20 s before the end)\n", *duration)
		return 2
	}
	if *advert != "" {
		if f, err := strconv.ParseFloat(*advert, 64); err != nil || f <= 0 {
			fmt.Fprintf(os.Stderr, "chaos: -advert-interval %q: want a number of seconds such as 1 or 0.1\n", *advert)
			return 2
		}
	}
	if *target != "lab" && *target != "kube" {
		fmt.Fprintf(os.Stderr, "chaos: -target %q: want lab or kube\n", *target)
		return 2
	}
	if *target == "kube" && *other != "" {
		fmt.Fprintln(os.Stderr, "chaos: -binary: the cluster runs the image (-image), not a binary")
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "chaos: the lab builds network namespaces and runs keepalived: run it as root")
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: -cpuprofile:", err)
			return 2
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: -cpuprofile:", err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "chaos: -cpuprofile:", err)
			}
		}()
	}
	if *out == "" {
		*out = filepath.Join("out", "chaos", fmt.Sprintf("seed-%d", seed))
		if *target == "kube" {
			*out += "-kube"
		}
		if *advert != "" {
			*out += "-advert-" + *advert
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A closed pipe on stdout (| head) must not kill the run before it
	// removed its namespaces: writes fail instead.
	signal.Ignore(syscall.SIGPIPE)

	replay := fmt.Sprintf("make chaos SEED=%d DURATION=%s", seed, *duration)
	if *target == "kube" {
		replay += " TARGET=kube"
	}
	if *advert != "" {
		replay += " ADVERT_INTERVAL=" + *advert
	}
	fmt.Printf("chaos: seed %d, %s (replay: %s)\n", seed, *duration, replay)
	dir, err := os.MkdirTemp("/var/tmp", "ipfailover-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	commit, err := build(ctx, dir, *other)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	var nodeOut io.Writer
	if *verbose {
		nodeOut = os.Stderr
	}
	o := chaos.Options{
		Seed: seed, Duration: *duration, AdvertInterval: *advert,
		Binary: filepath.Join(dir, "ipfailover"), Self: filepath.Join(dir, "chaos"),
		Out: *out, Progress: os.Stdout, Log: os.Stderr, Verbose: *verbose, NodeOut: nodeOut, Commit: commit,
		Target: *target, KubeBin: *kubeBin, Image: *image,
	}
	if *target == "kube" {
		// A cluster of its own, beside any that make kube-up left.
		if o.KubeDir, err = filepath.Abs(filepath.Join("out", "chaos-kube")); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 1
		}
		o.Commit += ", image " + *image
	}
	res, err := chaos.Run(ctx, o)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "\nchaos: interrupted; everything it made is removed")
		return 130
	case res == nil:
		fmt.Fprintln(os.Stderr, "chaos: FAILED:", err)
		return 1
	}
	return finish(res, err, seed)
}

// finish prints a run's summary and where its report is, and returns the
// exit code: 1 when it failed or its report could not be written.
func finish(res *chaos.Result, err error, seed uint64) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: writing the report:", err)
	}
	fmt.Println()
	summary(res)
	fmt.Printf("\nreport: %s\n", res.Report)
	for _, p := range res.Pictures {
		fmt.Printf("timeline: %s\n", p)
	}
	if !res.Pass() || err != nil {
		fmt.Printf("chaos: FAILED (seed %d): see the report's \"What failed\"\n", seed)
		return 1
	}
	fmt.Printf("chaos: passed (seed %d)\n", seed)
	return 0
}

// summary prints the per-kind and per-VIP figures and what failed.
func summary(res *chaos.Result) {
	d, a := res.Data, res.Analysis
	for _, k := range a.Kinds {
		var parts []string
		for vi, v := range d.VIPs {
			outs := k.Outages[vi]
			if len(outs) == 0 {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %d, longest %s", v, len(outs), slices.Max(outs).Round(time.Millisecond)))
		}
		if len(parts) == 0 {
			parts = []string{"no outage"}
		}
		fmt.Printf("%-18s %3d faults (%d alone): %s\n", k.Kind, k.Faults, k.Isolated, strings.Join(parts, "; "))
	}
	for _, r := range a.VIPs {
		fmt.Printf("%-15s available %.3f%%, down %s, on two nodes %s, no holder while a node could hold it %s\n",
			r.VIP, r.Availability*100, r.Down.Round(time.Millisecond), r.Twice.Round(time.Millisecond), r.NoHolderHealthy.Round(time.Millisecond))
	}
	if len(d.Stalls) > 0 {
		var all, longest time.Duration
		for _, st := range d.Stalls {
			all += st.Len()
			longest = max(longest, st.Len())
		}
		fmt.Printf("the client stalled %d times, the longest %s, %s in all (not counted as outages)\n", len(d.Stalls), longest.Round(time.Millisecond), all.Round(time.Millisecond))
	}
	for _, v := range a.Violations {
		fmt.Println("LIMIT:", v.String(d))
	}
	for _, p := range res.Problems {
		fmt.Println("PROBLEM:", p)
	}
	for _, c := range res.Checks {
		if !c.OK {
			fmt.Printf("INVARIANT: %s: %s\n", c.Name, c.Detail)
		}
	}
}

func parseSeed(s string) (uint64, error) {
	if s == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		// Small enough to type.
		return binary.BigEndian.Uint64(b[:]) % 1_000_000, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// build compiles ./cmd/ipfailover into dir (or copies other there) and
// copies this program there as the nodes' service; it returns the commit.
func build(ctx context.Context, dir, other string) (string, error) {
	if other != "" {
		b, err := os.ReadFile(other)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "ipfailover"), b, 0o755); err != nil {
			return "", err
		}
		return "binary " + other, copySelf(dir)
	}
	commit := "unknown"
	if b, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(b))
		if st, _ := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); strings.TrimSpace(string(st)) != "" {
			commit += " (with uncommitted changes)"
		}
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+strings.Fields(commit)[0], "-o", filepath.Join(dir, "ipfailover"), "./cmd/ipfailover")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ./cmd/ipfailover: %w\n%s", err, out)
	}
	return commit, copySelf(dir)
}

// copySelf copies this program into dir, where the nodes see it, as their
// service.
func copySelf(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "chaos"), b, 0o755)
}
