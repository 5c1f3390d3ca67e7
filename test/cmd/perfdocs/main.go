// Command perfdocs writes docs/performance/results.md from the outputs of
// the last runs: the table make bench writes to out/bench.md (with its
// commit, date and machine) and the reports make chaos writes to
// out/chaos/seed-N[-kube]/report.md. make perf-docs runs it.
//
//	go run ./test/cmd/perfdocs [-bench out/bench.md] [-o docs/performance/results.md] [-note TEXT ...] [REPORT.md ...]
//	go run ./test/cmd/perfdocs -previous docs/performance/results.md [-replace-notes] [-note TEXT ...] [REPORT.md ...]
//
// With -previous the page is the previous page carried forward: its bench
// part and its notes as they are, its chaos runs, and the reports given
// added to them (a report of a run already there replaces its row), with
// the notes given after the earlier ones (or in their place, with
// -replace-notes). The outputs under out/ stay on the machine that made
// them; the page is what a later one has of them.
//
// The page is tables, each with the commit, date and machine of its run,
// and a few notes a reader of them needs, at most maxNoteLines lines: the
// story of how the runs came about belongs in the commit messages and
// CHANGELOG.md, so a page whose notes run longer is refused.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

func main() {
	benchPath := flag.String("bench", "out/bench.md", "the table make bench wrote")
	out := flag.String("o", "docs/performance/results.md", "the page to write")
	var notes []string
	flag.Func("note", "a note a reader of the tables needs, such as where the figures come from when the outputs are not this machine's last runs (repeatable; empty ones are left out)", func(v string) error {
		if v = strings.Join(strings.Fields(v), " "); v != "" {
			notes = append(notes, v)
		}
		return nil
	})
	replaceNotes := flag.Bool("replace-notes", false, "with -previous, the notes given replace the previous page's instead of following them")
	var extra []string
	flag.Func("extra", "a table of a later partial run (make bench's -only), shown after the whole run's (or, with -previous, after the page's bench part) with its measured rows (repeatable)", func(v string) error {
		extra = append(extra, v)
		return nil
	})
	previous := flag.String("previous", "", "carry this page forward instead of reading a bench table: its bench part, notes and chaos runs, with the -extra tables and the reports given added")
	flag.Parse()
	var err error
	if *previous != "" {
		err = carry(*previous, extra, flag.Args(), *out, notes, *replaceNotes)
	} else {
		err = run(*benchPath, extra, flag.Args(), *out, notes)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfdocs:", err)
		os.Exit(1)
	}
}

func run(benchPath string, extraPaths, reports []string, out string, notes []string) error {
	data, err := os.ReadFile(benchPath)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist: run make bench first", benchPath)
	}
	if err != nil {
		return err
	}
	b, err := parseBench(data)
	if err != nil {
		return fmt.Errorf("%s: %w", benchPath, err)
	}
	extra, err := readExtra(extraPaths)
	if err != nil {
		return err
	}
	runs, err := readReports(reports)
	if err != nil {
		return err
	}
	page, err := render(newPage(b, extra, notes), runs)
	if err != nil {
		return err
	}
	return write(out, page)
}

// readExtra reads the tables of later partial runs.
func readExtra(paths []string) ([]benchTable, error) {
	var extra []benchTable
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		e, err := parseBench(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		extra = append(extra, e)
	}
	return extra, nil
}

// carry writes out from the page at previous with the reports' runs added.
func carry(previous string, extraPaths, reports []string, out string, notes []string, replaceNotes bool) error {
	data, err := os.ReadFile(previous)
	if err != nil {
		return err
	}
	pg, err := parsePage(data)
	if err != nil {
		return fmt.Errorf("%s: %w", previous, err)
	}
	extra, err := readExtra(extraPaths)
	if err != nil {
		return err
	}
	for _, e := range extra {
		pg.bench += extraSection(e)
	}
	if replaceNotes {
		pg.notes = nil
	}
	pg.notes = append(pg.notes, notes...)
	runs, err := readReports(reports)
	if err != nil {
		return err
	}
	page, err := render(pg, runs)
	if err != nil {
		return err
	}
	return write(out, page)
}

func readReports(paths []string) ([]chaosRun, error) {
	var runs []chaosRun
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		r, err := parseChaos(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r.dir = filepath.Base(filepath.Dir(path))
		runs = append(runs, r)
	}
	return runs, nil
}

func write(out string, page []byte) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, page, 0o644)
}

// benchTable is out/bench.md: the rows and what they were measured on.
type benchTable struct {
	table string // the Markdown table, as make bench wrote it
	// provenance is its last line: "Measured by `make bench` at commit
	// ... on DATE: N rounds; MACHINE."
	provenance             string
	commit, date, machine  string
	rounds                 int
	uncommittedAtBenchTime bool
}

var measured = regexp.MustCompile("^Measured by `make bench` at commit (\\S+)( \\(with uncommitted changes\\))? on (\\d{4}-\\d{2}-\\d{2}): (\\d+) rounds; (.+)\\.$")

// parseBench reads the Markdown test/bench.Report.WriteMarkdown writes.
func parseBench(data []byte) (benchTable, error) {
	var b benchTable
	var table []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			table = append(table, line)
		case strings.HasPrefix(line, "Measured by"):
			m := measured.FindStringSubmatch(line)
			if m == nil {
				return b, fmt.Errorf("the line %q does not say commit, date, rounds and machine as make bench writes them", line)
			}
			b.provenance, b.commit, b.uncommittedAtBenchTime, b.date, b.machine = line, m[1], m[2] != "", m[3], m[5]
			b.rounds, _ = strconv.Atoi(m[4])
		}
	}
	if len(table) < 3 || !strings.HasPrefix(table[0], "| row |") {
		return b, errors.New("no table of rows")
	}
	if b.provenance == "" {
		return b, errors.New("no line saying where it was measured (Measured by `make bench` at commit ...)")
	}
	b.table = strings.Join(table, "\n")
	return b, nil
}

// measuredRows is table without the rows its run did not measure (a
// median of "-").
func measuredRows(table string) string {
	var out []string
	for i, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if i >= 2 && len(cells) > 2 && strings.TrimSpace(cells[2]) == "-" {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// chaosRun is what the results page shows of one make chaos report.
type chaosRun struct {
	dir              string
	seed             int
	duration, target string
	pass             bool
	faults           int
	commit, start    string
	load             string
	availLo, availHi float64
	longest, twice   time.Duration
	vips             int
}

var (
	chaosTitle  = regexp.MustCompile(`^# Chaos run: seed (\d+), (\S+), (.+): (PASS|FAIL)$`)
	chaosFaults = regexp.MustCompile(`the same seed draws the same (\d+) faults`)
	chaosBuild  = regexp.MustCompile(`^ipfailover ([0-9a-f]+)(?:, [^;]*?)? on \d+ nodes`)
	chaosStart  = regexp.MustCompile(`^Measured over .+? from (\d{4}-\d{2}-\d{2} \d{2}:\d{2}):[\d.]+ UTC`)
	chaosLoad   = regexp.MustCompile(`load average \(1 minute\) during the run: (\S+) on (\d+) cores`)
)

// parseChaos reads the report test/chaos.WriteMarkdown writes: its title,
// build, start and load, and the table "Per VIP, over the run".
func parseChaos(data []byte) (chaosRun, error) {
	var r chaosRun
	lines := strings.Split(string(data), "\n")
	m := chaosTitle.FindStringSubmatch(lines[0])
	if m == nil {
		return r, fmt.Errorf("the first line %q is not a chaos report's title", lines[0])
	}
	r.seed, _ = strconv.Atoi(m[1])
	r.duration, r.target, r.pass = m[2], m[3], m[4] == "PASS"
	inVIPs := false
	for _, line := range lines[1:] {
		if m := chaosFaults.FindStringSubmatch(line); m != nil {
			r.faults, _ = strconv.Atoi(m[1])
		}
		if m := chaosBuild.FindStringSubmatch(line); m != nil {
			r.commit = m[1]
		}
		if m := chaosStart.FindStringSubmatch(line); m != nil {
			r.start = m[1] + " UTC"
		}
		if m := chaosLoad.FindStringSubmatch(line); m != nil {
			r.load = m[1] + " on " + m[2] + " cores"
		}
		if strings.HasPrefix(line, "## ") {
			inVIPs = line == "## Per VIP, over the run"
			continue
		}
		if !inVIPs || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| VIP |") {
			continue
		}
		// | VIP | availability | down | outages | longest | probes failed | no holder | no holder while a node could hold it | on two nodes |
		f := strings.Split(strings.Trim(line, "| "), " | ")
		if len(f) != 9 {
			return r, fmt.Errorf("a row of Per VIP has %d columns, want 9: %q", len(f), line)
		}
		avail, err := strconv.ParseFloat(strings.TrimSuffix(f[1], " %"), 64)
		if err != nil {
			return r, fmt.Errorf("availability %q: %w", f[1], err)
		}
		longest, err := parseDur(f[4])
		if err != nil {
			return r, err
		}
		twice, err := parseDur(f[8])
		if err != nil {
			return r, err
		}
		if r.vips == 0 || avail < r.availLo {
			r.availLo = avail
		}
		r.availHi = max(r.availHi, avail)
		r.longest, r.twice = max(r.longest, longest), max(r.twice, twice)
		r.vips++
	}
	switch {
	case r.vips == 0:
		return r, errors.New("no rows under \"## Per VIP, over the run\"")
	case r.commit == "" || r.start == "" || r.faults == 0:
		return r, errors.New("no build, start or fault count")
	}
	return r, nil
}

// parseDur reads the report's durations: "12 ms", "3.070 s".
func parseDur(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		return 0, fmt.Errorf("duration %q: %w", s, err)
	}
	return d, nil
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// page is the results page but for the runs given to it: the whole bench
// run's provenance, the notes a reader of the tables needs, the bench part
// (the whole run's table and the later partial ones) and the chaos runs of
// earlier pages.
type page struct {
	provenance string
	notes      []string
	bench      string
	rows       []chaosRow
}

// chaosRow is a chaos run's row as a page shows it, with what it sorts by.
type chaosRow struct {
	dir, start, line string
}

func newPage(b benchTable, extra []benchTable, notes []string) page {
	pg := page{
		provenance: fmt.Sprintf("Measured by `make bench` at commit %s%s on %s, %d rounds, on %s.", b.commit, dirty(b), b.date, b.rounds, b.machine),
		notes:      notes,
	}
	var w strings.Builder
	w.WriteString(b.table + "\n\n")
	for _, e := range extra {
		w.WriteString(extraSection(e))
	}
	pg.bench = w.String()
	return pg
}

// dirty says so when b was measured on a tree with uncommitted changes.
func dirty(b benchTable) string {
	if b.uncommittedAtBenchTime {
		return " with uncommitted changes"
	}
	return ""
}

// extraSection shows the measured rows of a later partial run.
func extraSection(e benchTable) string {
	return fmt.Sprintf("### At commit %s%s on %s\n\n", e.commit, dirty(e), e.date) +
		fmt.Sprintf("Rows of a later run of some phases (`make bench`'s `-only`), %d rounds, on %s:\n\n", e.rounds, e.machine) +
		measuredRows(e.table) + "\n\n"
}

// The lines render writes around the parts parsePage reads back.
const (
	generated  = "<!-- Generated by `make perf-docs` from make bench's out/bench.md and make chaos's reports; DO NOT EDIT. -->"
	notesHead  = "## Notes"
	benchHead  = "## make bench"
	wholeHead  = "### The whole run"
	chaosHead  = "## make chaos"
	chaosTable = "| run | commit | started | faults | result | available, per VIP | longest outage | on two nodes | load |"
)

// The notes are a bulleted list, each note wrapped at noteWidth columns,
// of at most maxNoteLines lines in all.
const (
	noteWidth    = 100
	maxNoteLines = 19
)

// parsePage reads back a page render wrote: the line saying where the
// whole bench run was measured, wherever it stands before the chaos part;
// the bench part after it; the notes under their heading; and the chaos
// runs' rows.
func parsePage(data []byte) (page, error) {
	var pg page
	text := string(data)
	if !strings.HasPrefix(text, generated) {
		return pg, errors.New("not a page make perf-docs wrote (its first line differs)")
	}
	head, rest, ok := strings.Cut(text, "\n"+benchHead+"\n")
	if !ok {
		return pg, fmt.Errorf("no %q section", benchHead)
	}
	bench, chaos, ok := strings.Cut(rest, "\n"+chaosHead+"\n")
	if !ok {
		return pg, fmt.Errorf("no %q section", chaosHead)
	}
	for _, line := range strings.Split(head+"\n"+bench, "\n") {
		if strings.HasPrefix(line, "Measured by `make bench`") {
			pg.provenance = line
			break
		}
	}
	if pg.provenance == "" {
		return pg, errors.New("no line saying where the bench table was measured")
	}
	if _, after, ok := strings.Cut(bench, pg.provenance+"\n"); ok {
		bench = after
	}
	pg.bench = strings.Trim(bench, "\n") + "\n\n"
	if _, notes, ok := strings.Cut(head, "\n"+notesHead+"\n"); ok {
		pg.notes = parseNotes(notes)
	}
	inTable := false
	for _, line := range strings.Split(chaos, "\n") {
		switch {
		case line == chaosTable:
			inTable = true
		case inTable && strings.HasPrefix(line, "| `"):
			f := strings.Split(line, " | ")
			dir, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
			if len(f) != 9 || dir == "" {
				return pg, fmt.Errorf("a chaos row %q has not the columns render writes", line)
			}
			pg.rows = append(pg.rows, chaosRow{dir: dir, start: f[2], line: line})
		}
	}
	return pg, nil
}

// parseNotes reads back the bulleted list wrapNote wrote, each note on
// one line again.
func parseNotes(text string) []string {
	var notes []string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "- "):
			notes = append(notes, strings.TrimPrefix(line, "- "))
		case strings.HasPrefix(line, "  ") && len(notes) > 0:
			notes[len(notes)-1] += " " + strings.TrimSpace(line)
		}
	}
	return notes
}

// wrapNote is note as a bullet, its words wrapped at noteWidth characters and
// its further lines indented under the first. A word that would open a
// block of its own at the start of a line (a list item, a heading, a
// quote) stays on the line before, past the width.
func wrapNote(note string) []string {
	var lines []string
	line := "-"
	for _, word := range strings.Fields(note) {
		if len(line) > 2 && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > noteWidth && !opensBlock.MatchString(word) {
			lines = append(lines, line)
			line = " "
		}
		line += " " + word
	}
	return append(lines, line)
}

// opensBlock matches a word that, first on a line, makes Markdown start a
// list item, heading, quote or rule there.
var opensBlock = regexp.MustCompile(`^([+*>]|-+|=+|#{1,6}|\d{1,9}[.)])$`)

// render is the results page. It refuses notes longer than maxNoteLines.
func render(pg page, runs []chaosRun) ([]byte, error) {
	var notes []string
	for _, n := range pg.notes {
		notes = append(notes, wrapNote(n)...)
	}
	if len(notes) > maxNoteLines {
		return nil, fmt.Errorf("the notes take %d lines, more than %d: keep to what a reader of the tables needs; how the runs came about goes in the commit messages and CHANGELOG.md", len(notes), maxNoteLines)
	}
	var w bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("%s", generated)
	p("")
	p("# Performance results")
	p("")
	p("What `make bench` and `make chaos` measured, each table with the commit, date and machine of its")
	p("run. How they measure, and what each row means: [performance](../performance.md).")
	if len(notes) > 0 {
		p("")
		p("%s", notesHead)
		p("")
		for _, line := range notes {
			p("%s", line)
		}
	}
	p("")
	p("%s", benchHead)
	p("")
	p("%s", wholeHead)
	p("")
	p("%s", pg.provenance)
	p("")
	w.WriteString(pg.bench)
	p("%s", chaosHead)
	p("")
	rows := slices.Clone(pg.rows)
	for _, r := range runs {
		rows = slices.DeleteFunc(rows, func(o chaosRow) bool { return o.dir == r.dir })
		rows = append(rows, chaosRow{dir: r.dir, start: r.start, line: r.row()})
	}
	if len(rows) == 0 {
		p("No `make chaos` report was given to this page.")
		return w.Bytes(), nil
	}
	slices.SortFunc(rows, func(x, y chaosRow) int { return strings.Compare(x.start+x.dir, y.start+y.dir) })
	p("Per run, from its report (`out/chaos/RUN/report.md`): the commit it ran, its start, the faults")
	p("its seed drew, the result, each VIP's availability (the lowest and the highest), the longest")
	p("outage, the longest time a VIP sat on two nodes, and the machine: its load average during the run")
	p("and its cores.")
	p("")
	p("%s", chaosTable)
	p("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		p("%s", r.line)
	}
	return w.Bytes(), nil
}

// row is r's row in the page's table of chaos runs.
func (r chaosRun) row() string {
	result := "pass"
	if !r.pass {
		result = "**fail**"
	}
	return fmt.Sprintf("| %#q: seed %d, %s, %s | %s | %s | %d | %s | %.1f–%.1f %% | %s | %s | %s |",
		r.dir, r.seed, r.duration, r.target, r.commit, r.start, r.faults, result, r.availLo, r.availHi, fmtDur(r.longest), fmtDur(r.twice), r.load)
}
