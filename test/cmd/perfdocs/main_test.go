package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/test/bench"
)

// TestParseBench reads what make bench writes, so that the page follows
// the bench's own writer.
func TestParseBench(t *testing.T) {
	rep := &bench.Report{
		Commit: "0123456789ab", Date: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), Rounds: 5,
		CPUs: 2, CPU: "AMD EPYC", Kernel: "6.18.44", Keepaliv: "Keepalived v2.2.7", Go: "go1.26.8",
		Rows: []bench.Row{bench.TimeRow("graceful handover (SIGTERM)", []bench.Sample{{Value: 34 * time.Millisecond}}, "", "0.86–0.89 s")},
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	b, err := parseBench(md.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, md.String())
	}
	got := []any{b.commit, b.date, b.rounds, b.machine, b.uncommittedAtBenchTime, strings.Count(b.table, "\n")}
	want := []any{"0123456789ab", "2026-11-23", 5, "2 CPUs (AMD EPYC), Linux 6.18.44, Keepalived v2.2.7, go1.26.8", false, 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	rep.Dirty = true
	md.Reset()
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if b, err := parseBench(md.Bytes()); err != nil || !b.uncommittedAtBenchTime {
		t.Errorf("a dirty tree: %v, uncommitted %v", err, b.uncommittedAtBenchTime)
	}
	if _, err := parseBench([]byte("| row | median |\n|---|---|\n| a | 1 ms |\n")); err == nil {
		t.Error("a table without its provenance was accepted")
	}
}

// chaosReport is the part of a make chaos report the page reads, in
// test/chaos.WriteMarkdown's words.
const chaosReport = "# Chaos run: seed 7, 10m0s, lab: PASS\n" +
	"\n" +
	"Replay: `make chaos SEED=7 DURATION=10m0s` (schedule digest `abc`; the same seed draws the same 81 faults).\n" +
	"ipfailover 494c099 on 3 nodes (node1, node2, node3); VIPs 192.0.2.100, 192.0.2.101; every node's environment: `X=1`.\n" +
	"Measured over 10m0.5s from 2026-11-25 10:00:01.000 UTC: a client ...\n" +
	"The machine's load average (1 minute) during the run: 1.6–4.5 on 2 cores; the lab shares them with whatever else runs.\n" +
	"\n" +
	"## Per fault kind\n\n| fault kind | faults | alone | VIP | outages | median | longest | on two nodes | limit (alone) |\n|---|---|---|---|---|---|---|---|---|\n" +
	"| node-death | 20 | 3 | 192.0.2.100 | 4 | 11 ms | 9.000 s | 0 ms | 3.1 s |\n\n" +
	"## Per VIP, over the run\n\n" +
	"| VIP | availability | down | outages | longest | probes failed | no holder | no holder while a node could hold it | on two nodes |\n" +
	"|---|---|---|---|---|---|---|---|---|\n" +
	"| 192.0.2.100 | 92.300 % | 46.200 s | 900 | 3.070 s | 4000 of 60000 | 10.000 s | 2.000 s | 931 ms |\n" +
	"| 192.0.2.101 | 93.312 % | 40.000 s | 800 | 2.100 s | 3000 of 60000 | 9.000 s | 1.000 s | 12 ms |\n" +
	"\n## Limits from the timers\n\n| a | b |\n|---|---|\n| x | y |\n"

func TestParseChaos(t *testing.T) {
	r, err := parseChaos([]byte(chaosReport))
	if err != nil {
		t.Fatal(err)
	}
	r.dir = "seed-7"
	want := chaosRun{dir: "seed-7", seed: 7, duration: "10m0s", target: "lab", pass: true, faults: 81, commit: "494c099",
		start: "2026-11-25 10:00 UTC", load: "1.6–4.5 on 2 cores", availLo: 92.3, availHi: 93.312,
		longest: 3070 * time.Millisecond, twice: 931 * time.Millisecond, vips: 2}
	if diff := cmp.Diff(want, r, cmp.AllowUnexported(chaosRun{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := parseChaos([]byte("# Chaos run: seed 7, 10m0s, lab: PASS\n")); err == nil {
		t.Error("a report without its tables was accepted")
	}
}

// TestRun writes a page from a bench table and a chaos report, with the
// commit, date and machine of each.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	benchMD := filepath.Join(dir, "bench.md")
	if err := os.WriteFile(benchMD, []byte("| row | median | worst | VRRP limit | shipped image |\n|---|---|---|---|---|\n| crash move | 2.388 s | 3.016 s | 3.027 s | 2.1–2.3 s |\n\n"+
		"Measured by `make bench` at commit bfa212061202 on 2026-11-23: 5 rounds; 2 CPUs (AMD EPYC), Linux 6.18.44-fc-v769, Keepalived v2.2.7 (01/16,2022), go1.26.8.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "chaos", "seed-7", "report.md")
	if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(report, []byte(chaosReport), 0o644); err != nil {
		t.Fatal(err)
	}
	extraMD := filepath.Join(dir, "bench-only.md")
	if err := os.WriteFile(extraMD, []byte("| row | median | worst | VRRP limit | shipped image |\n|---|---|---|---|---|\n| crash move | - | - |  | 2.1–2.3 s |\n| kube: node death: each VIP of the holder answers from another node | 530.5 ms | 794.2 ms | 602.3 ms |  |\n\n"+
		"Measured by `make bench` at commit 0123456789ab on 2026-11-27: 5 rounds; 2 CPUs (AMD EPYC), Linux 6.18.44-fc-v782, Keepalived v2.2.7 (01/16,2022), go1.26.8.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "docs", "results.md")
	if err := run(benchMD, []string{extraMD}, []string{report}, out, nil); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(page), "| crash move |") != 1 {
		t.Errorf("the partial run's unmeasured crash move row is on the page:\n%s", page)
	}
	wantAll(t, page,
		"<!-- Generated by `make perf-docs`",
		"## make bench\n\n### The whole run\n\nMeasured by `make bench` at commit bfa212061202 on 2026-11-23, 5 rounds, on 2 CPUs (AMD EPYC), Linux 6.18.44-fc-v769",
		"| crash move | 2.388 s | 3.016 s | 3.027 s | 2.1–2.3 s |",
		"### At commit 0123456789ab on 2026-11-27",
		"| kube: node death: each VIP of the holder answers from another node | 530.5 ms | 794.2 ms | 602.3 ms |  |",
		"| `seed-7`: seed 7, 10m0s, lab | 494c099 | 2026-11-25 10:00 UTC | 81 | pass | 92.3–93.3 % | 3.07 s | 931 ms | 1.6–4.5 on 2 cores |",
	)
	if strings.Contains(string(page), notesHead) {
		t.Errorf("a page without notes has a %q section:\n%s", notesHead, page)
	}
	if err := run(filepath.Join(dir, "none.md"), nil, nil, out, nil); err == nil || !strings.Contains(err.Error(), "make bench") {
		t.Errorf("without a bench table: %v, want an error saying to run make bench", err)
	}
}

// A report of the real cluster names its target in words and its image
// beside the build, and counts its time in seconds with a space.
func TestParseChaosCluster(t *testing.T) {
	report := strings.Replace(chaosReport, "# Chaos run: seed 7, 10m0s, lab: PASS", "# Chaos run: seed 7, 10m0s, the real cluster: PASS", 1)
	report = strings.Replace(report, "ipfailover 494c099 on 3 nodes", "ipfailover 494c099, image localhost/ipfailover:dev on 3 nodes", 1)
	report = strings.Replace(report, "Measured over 10m0.5s from", "Measured over 654.580 s from", 1)
	r, err := parseChaos([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if r.target != "the real cluster" || r.commit != "494c099" || r.start != "2026-11-25 10:00 UTC" || r.faults != 81 {
		t.Errorf("parsed %+v", r)
	}
}

// TestCarry carries a page forward: the same page when nothing is added,
// and with a new run added, a run of the same name replaced, the bench
// part kept (a partial run of a dirty tree saying so), the new note after
// the old one, or in its place with -replace-notes.
func TestCarry(t *testing.T) {
	dir := t.TempDir()
	benchMD := filepath.Join(dir, "bench.md")
	if err := os.WriteFile(benchMD, []byte("| row | median | worst | VRRP limit | shipped image |\n|---|---|---|---|---|\n| crash move | 2.388 s | 3.016 s | 3.027 s | 2.1–2.3 s |\n\n"+
		"Measured by `make bench` at commit bfa212061202 on 2026-11-23: 5 rounds; 2 CPUs (AMD EPYC), Linux 6.18.44-fc-v769, Keepalived v2.2.7 (01/16,2022), go1.26.8.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := func(name, text string) string {
		path := filepath.Join(dir, "chaos", name, "report.md")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	first := filepath.Join(dir, "first.md")
	if err := run(benchMD, nil, []string{report("seed-7", chaosReport), report("seed-8", chaosReport)}, first, []string{"The first note."}); err != nil {
		t.Fatal(err)
	}
	was, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	same := filepath.Join(dir, "same.md")
	if err := carry(first, nil, nil, same, nil, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(same); string(got) != string(was) {
		t.Errorf("carried forward with nothing added, the page changed:\n%s\nwas:\n%s", got, was)
	}
	failed := strings.Replace(chaosReport, ": PASS", ": FAIL", 1)
	failed = strings.Replace(failed, "2026-11-25 10:00", "2026-11-26 11:00", 1)
	next := filepath.Join(dir, "next.md")
	later := filepath.Join(dir, "later.md")
	if err := os.WriteFile(later, []byte("| row | median | worst | VRRP limit | shipped image |\n|---|---|---|---|---|\n| cost | 3.1 % | 3.2 % |  |  |\n\n"+
		"Measured by `make bench` at commit 0123456789ab (with uncommitted changes) on 2026-11-28: 1 rounds; 2 CPUs (AMD EPYC), Linux 6.18.44-fc-v769, Keepalived v2.2.7 (01/16,2022), go1.26.8.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := carry(first, []string{later}, []string{report("seed-8", failed), report("seed-9", chaosReport)}, next, []string{"The second note."}, false); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(next)
	if err != nil {
		t.Fatal(err)
	}
	wantAll(t, page,
		"at commit bfa212061202 on 2026-11-23, 5 rounds",
		"| crash move | 2.388 s | 3.016 s | 3.027 s | 2.1–2.3 s |\n\n### At commit 0123456789ab with uncommitted changes on 2026-11-28\n\nRows of a later run of some phases (`make bench`'s `-only`), 1 rounds, on 2 CPUs",
		"| cost | 3.1 % | 3.2 % |  |  |\n\n## make chaos",
		"## Notes\n\n- The first note.\n- The second note.\n\n## make bench",
		"| `seed-7`: seed 7, 10m0s, lab | 494c099 | 2026-11-25 10:00 UTC | 81 | pass |",
		"| `seed-9`: seed 7, 10m0s, lab | 494c099 | 2026-11-25 10:00 UTC | 81 | pass |",
		"| `seed-8`: seed 7, 10m0s, lab | 494c099 | 2026-11-26 11:00 UTC | 81 | **fail** |",
	)
	if n := strings.Count(string(page), "| `seed-8`"); n != 1 {
		t.Errorf("seed-8 has %d rows, want 1 (the new report's)", n)
	}
	if i, j := strings.Index(string(page), "`seed-9`"), strings.Index(string(page), "`seed-8`"); i > j {
		t.Errorf("rows not in the order of their start:\n%s", page)
	}
	replaced := filepath.Join(dir, "replaced.md")
	if err := carry(next, nil, nil, replaced, []string{"The only note."}, true); err != nil {
		t.Fatal(err)
	}
	page, err = os.ReadFile(replaced)
	if err != nil {
		t.Fatal(err)
	}
	wantAll(t, page, "## Notes\n\n- The only note.\n\n## make bench", "| `seed-9`: seed 7, 10m0s, lab |", "| cost | 3.1 % | 3.2 % |")
	if strings.Contains(string(page), "first note") {
		t.Errorf("-replace-notes kept the earlier notes:\n%s", page)
	}
	if err := carry(benchMD, nil, nil, filepath.Join(dir, "x.md"), nil, false); err == nil {
		t.Error("a bench table carried forward as a page: no error")
	}
}

// TestNotes: a long note wraps into an indented bullet and reads back as
// it was, a word that would open a block never starts a line, and notes
// past maxNoteLines are refused.
func TestNotes(t *testing.T) {
	long := strings.Repeat("word ", 30) + "- + 1. ## > " + strings.Repeat("more ", 20) + strings.Repeat("0.2–0.3 ", 20) + "end"
	lines := wrapNote(long)
	if len(lines) < 3 {
		t.Fatalf("%d lines, want the note wrapped:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, line := range lines {
		first, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case i == 0 && !strings.HasPrefix(line, "- "), i > 0 && !strings.HasPrefix(line, "  "):
			t.Errorf("line %d %q: want a bullet and its indented lines", i, line)
		case i > 0 && opensBlock.MatchString(first):
			t.Errorf("line %d %q starts with a block marker", i, line)
		case utf8.RuneCountInString(line) > noteWidth && !strings.Contains(line, " - ") && !strings.Contains(line, " + "):
			t.Errorf("line %d is %d characters, more than %d", i, utf8.RuneCountInString(line), noteWidth)
		case i < len(lines)-1 && utf8.RuneCountInString(line+" "+strings.Fields(lines[i+1])[0]) <= noteWidth:
			t.Errorf("line %d %q ends short: the next word fits on it", i, line)
		}
	}
	notes := []string{long, "A short one."}
	if diff := cmp.Diff(notes, parseNotes(strings.Join(append(lines, wrapNote("A short one.")...), "\n"))); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}

	pg := page{provenance: "Measured by `make bench` at commit x on 2026-11-23, 5 rounds, on y.", bench: "| row |\n\n"}
	for range maxNoteLines {
		pg.notes = append(pg.notes, "One line.")
	}
	if _, err := render(pg, nil); err != nil {
		t.Errorf("%d lines of notes: %v", maxNoteLines, err)
	}
	pg.notes = append(pg.notes, "One line too many.")
	if _, err := render(pg, nil); err == nil || !strings.Contains(err.Error(), "CHANGELOG.md") {
		t.Errorf("%d lines of notes: %v, want an error pointing at CHANGELOG.md", maxNoteLines+1, err)
	}
}

// wantAll fails t for each of wants the page lacks.
func wantAll(t *testing.T, page []byte, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
}
