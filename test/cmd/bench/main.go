// Command bench measures ipfailover in a three-node cluster of network
// namespaces: failover times against their VRRP limits, rollouts, clients
// after healed partitions (beside the shipped image's configuration),
// startup, scrape latency, a flood of a holder's metrics port, memory, CPU
// at rest, the cost of VRRP adverts, a 254-VIP scale run and a ten-node
// one. It prints one table and writes the figures to out/bench.json for
// comparison between commits, and the README's table, with the commit and
// machine, to out/bench.md. It needs root, builds ./cmd/ipfailover itself
// and removes every namespace and process it made, also on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/bench"
	"github.com/ipfailover/ipfailover/test/chaos"
	"github.com/ipfailover/ipfailover/test/lab"
)

func main() {
	// The chaos phase's nodes run this program as their service, and
	// the flood phase as its flooder.
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(lab.ServeName(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "flood" {
		os.Exit(bench.Flood(os.Args[2:]))
	}
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(log, level); err != nil {
		log.Error("bench failed", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, level *slog.LevelVar) error {
	rounds := flag.Int("rounds", 5, "rounds of each failover measurement")
	quick := flag.Bool("quick", false, "smoke test: 1 round, short scrape, no scale rows")
	scale := flag.Bool("scale", true, "add the 254-VIP scale rows")
	out := flag.String("out", "out/bench.json", "where to write the figures as JSON (empty: nowhere)")
	scrapeFor := flag.Duration("scrape-for", 3*time.Second, "how long the scrapers run")
	cpuFor := flag.Duration("cpu-for", 10*time.Second, "how long each CPU row measures a fleet at rest")
	costFor := flag.Duration("cost-for", 20*time.Second, "how long the adverts and scale10 rows count a settled fleet's VRRP packets and CPU")
	poll := flag.Duration("poll", 5*time.Millisecond, "interval between netlink address dumps")
	verbose := flag.Bool("v", false, "copy every node's output to stderr")
	binary := flag.String("binary", "", "measure this ipfailover binary (outside /tmp) instead of building ./cmd/ipfailover")
	only := flag.String("only", "", "comma-separated phases to run: startup, failover, rollout, migrate, partition, scrape, flood, cpu, adverts, scale, scale10, image, kube, kube-failover, kube-pin, kube-upgrade, chaos (default all; kube-upgrade only with -upgrade-from)")
	image := flag.String("image", "localhost/ipfailover:dev", "the image whose size the image rows report, read with podman when it exists (empty: no image rows), and that the kube phase runs")
	kubeBin := flag.String("kube-bin", "bin/kube", "the Kubernetes binaries of the kube phase (make kube-bins)")
	chaosFor := flag.Duration("chaos-for", 2*time.Minute, "length of the chaos phase's mixed run")
	floodFor := flag.Duration("flood-for", 30*time.Second, "how long the flood phase floods a holder's metrics port before its failover")
	floodBaseline := flag.String("flood-baseline", "", "also flood this ipfailover binary, in the same run, round by round in turn with the one measured (its rows say \"baseline binary\")")
	upgradeFrom := flag.String("upgrade-from", "", "the image the kube-upgrade phase rolls the Deployment from, and back to, podman's tag (make image at an older commit)")
	var nodeEnv envList
	flag.Var(&nodeEnv, "node-env", "KEY=VALUE added to every node's environment (repeatable), to try a setting such as GOGC")
	debug := flag.Bool("debug", false, "log every change of the VIP holders while a fleet converges")
	flag.Parse()
	if *debug {
		level.Set(slog.LevelDebug)
	}
	if *quick {
		*rounds, *scale, *scrapeFor, *cpuFor, *costFor, *chaosFor = 1, false, time.Second, 3*time.Second, 5*time.Second, time.Minute
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the bench builds network namespaces: run it as root")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A closed pipe on stdout or stderr (| head) must not kill the bench
	// before it removed its namespaces: writes fail instead.
	signal.Ignore(syscall.SIGPIPE)

	// The nodes mount their own tmpfs on /tmp, so the binary lives elsewhere.
	dir, err := os.MkdirTemp("/var/tmp", "ipfailover-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ipfailover")
	began := time.Now()
	commit, dirty := gitCommit(ctx)
	if *binary != "" {
		// Copied under the name the startup watch looks for.
		b, err := os.ReadFile(*binary)
		if err != nil {
			return err
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			return err
		}
		commit, dirty = "binary "+*binary, false
	} else {
		log.Info("building", "binary", bin, "commit", commit)
		// As `make build` does: static, stripped.
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+commit, "-o", bin, "./cmd/ipfailover")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building ./cmd/ipfailover: %w", err)
		}
	}

	o := bench.Options{Binary: bin, Rounds: *rounds, Scale: *scale, ScrapeFor: *scrapeFor, CPUFor: *cpuFor, CostFor: *costFor, Poll: *poll, Log: log,
		Image: *image, KubeBin: *kubeBin, FloodFor: *floodFor}
	if *only != "" {
		o.Phases = strings.Split(*only, ",")
	}
	if *only == "" || slices.Contains(o.Phases, "flood") {
		if o.Flooder, err = copySelf(dir); err != nil {
			return err
		}
		if *floodBaseline != "" {
			b, err := os.ReadFile(*floodBaseline)
			if err != nil {
				return err
			}
			o.FloodBaseline = filepath.Join(dir, "ipfailover-baseline")
			if err := os.WriteFile(o.FloodBaseline, b, 0o755); err != nil {
				return err
			}
		}
	}
	kubeFaults := chaos.KubeBench{UpgradeRounds: min(*rounds, 2)}
	if *only == "" || slices.Contains(o.Phases, "kube-failover") {
		kubeFaults.Rounds = *rounds
	}
	if *only == "" || slices.Contains(o.Phases, "kube-pin") {
		kubeFaults.PinRounds = min(*rounds, 2)
	}
	if *only == "" || slices.Contains(o.Phases, "kube-upgrade") {
		kubeFaults.UpgradeFrom = *upgradeFrom
		if *upgradeFrom == "" && *only != "" {
			return fmt.Errorf("the kube-upgrade phase needs -upgrade-from IMAGE")
		}
	}
	o.NodeEnv = nodeEnv
	if *verbose {
		o.NodeOut = os.Stderr
	}
	rep, runErr := bench.Run(ctx, o)
	if rep == nil {
		return runErr
	}
	if runErr == nil && (kubeFaults.Rounds > 0 || kubeFaults.PinRounds > 0 || kubeFaults.UpgradeFrom != "") {
		rows, err := kubeFaultRows(ctx, log, dir, bin, *image, *kubeBin, commit, kubeFaults)
		if err != nil {
			return fmt.Errorf("kube faults: %w", err)
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Elapsed = time.Since(began).Seconds()
	}
	if runErr == nil && (*only == "" || slices.Contains(o.Phases, "chaos")) {
		rows, err := mixedRun(ctx, log, dir, bin, *chaosFor, commit)
		if err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Elapsed = time.Since(began).Seconds()
	}
	rep.Commit, rep.Dirty = commit, dirty
	if o.FloodBaseline != "" {
		rep.Notes = append(rep.Notes, "the flood rows' baseline binary: "+*floodBaseline)
	}
	rep.Date = time.Now().UTC()
	rep.Host, _ = os.Hostname()
	rep.Kernel = firstLine(os.ReadFile("/proc/sys/kernel/osrelease"))
	rep.CPUs = runtime.NumCPU()
	rep.CPU = cpuModel()
	rep.Go = runtime.Version()
	kv, _ := exec.Command("keepalived", "--version").CombinedOutput()
	rep.Keepaliv = firstLine(kv, nil)

	fmt.Println()
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	if *out != "" {
		if err := writeJSON(*out, rep); err != nil {
			return err
		}
		md := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".md"
		if err := writeMarkdown(md, rep); err != nil {
			return err
		}
		log.Info("wrote", "path", *out, "table", md, "elapsed", time.Duration(rep.Elapsed*float64(time.Second)).Round(time.Second))
	}
	return runErr
}

// benchSeed is the seed of the chaos phase: the same faults in every
// bench run, so its rows compare between commits.
const benchSeed = 1

// mixedRun is the chaos phase: a short run of seed benchSeed's faults on
// the lab, as make chaos runs it, turned into the table's rows. Its report
// and pictures go to out/bench-chaos.
func mixedRun(ctx context.Context, log *slog.Logger, dir, bin string, d time.Duration, commit string) ([]bench.Row, error) {
	svc, err := copySelf(dir)
	if err != nil {
		return nil, err
	}
	log.Info("chaos phase", "seed", benchSeed, "duration", d)
	res, err := chaos.Run(ctx, chaos.Options{Seed: benchSeed, Duration: d, Binary: bin, Self: svc, Out: filepath.Join("out", "bench-chaos"), Commit: commit})
	if err != nil {
		return nil, err
	}
	log.Info("chaos phase over", "report", res.Report, "pass", res.Pass())
	return res.BenchRows(), nil
}

// kubeFaultRows are the kube-failover and kube-upgrade phases: a cluster
// of their own, run by the chaos harness's cluster target and faults,
// measured as b says. The pods' logs go to out/bench-kube/logs.
func kubeFaultRows(ctx context.Context, log *slog.Logger, dir, bin, image, kubeBin, commit string, b chaos.KubeBench) ([]bench.Row, error) {
	svc, err := copySelf(dir)
	if err != nil {
		return nil, err
	}
	kubeDir, err := os.MkdirTemp("/var/tmp", "ipfailover-bench-kube-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(kubeDir)
	log.Info("kube fault phases", "failover_rounds", b.Rounds, "pin_rounds", b.PinRounds, "upgrade_from", b.UpgradeFrom)
	return chaos.KubeBenchRows(ctx, chaos.Options{Binary: bin, Self: svc, Out: filepath.Join("out", "bench-kube"), Commit: commit,
		Progress: os.Stderr, Log: os.Stderr, Target: "kube", KubeDir: kubeDir, KubeBin: kubeBin, Image: image}, b)
}

// copySelf copies this program into dir, where the nodes see it (their
// /tmp is their own), as their checked service, and returns its path.
func copySelf(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	svc := filepath.Join(dir, "bench")
	return svc, os.WriteFile(svc, b, 0o755)
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func writeMarkdown(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteMarkdown(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeJSON(path string, rep *bench.Report) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func gitCommit(ctx context.Context) (commit string, dirty bool) {
	b, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	st, _ := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(b)), strings.TrimSpace(string(st)) != ""
}

func firstLine(b []byte, err error) string {
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

// envList collects repeated -node-env flags.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}
