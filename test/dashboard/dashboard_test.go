package dashboard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipfailover/ipfailover/test/golden"
)

const (
	// committed is the dashboard as deploy/components/dashboard ships it.
	committed  = "../../deploy/components/dashboard/ipfailover.json"
	regenerate = "go test ./test/dashboard -run TestDashboardJSON -update"
	// metricsDoc lists every metric ipfailover serves, rendered from its
	// collectors.
	metricsDoc = "../../docs/reference/metrics.md"
)

// TestDashboardJSON: the committed dashboard is what the generator builds.
func TestDashboardJSON(t *testing.T) {
	got, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, committed, got, regenerate)
}

// panel is what the tests read of a panel of the committed JSON.
type panel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Targets     []target `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit     string `json:"unit"`
			Mappings []struct {
				Type    string                     `json:"type"`
				Options map[string]json.RawMessage `json:"options"`
			} `json:"mappings"`
			Custom struct {
				DrawStyle string `json:"drawStyle"`
				Stacking  struct {
					Mode string `json:"mode"`
				} `json:"stacking"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// target is one query of a panel.
type target struct {
	RefID   string `json:"refId"`
	Expr    string `json:"expr"`
	Legend  string `json:"legendFormat"`
	Instant bool   `json:"instant"`
}

// mapping is a value mapping: a value (or, with from set, every value from
// it up) shown as text in a colour.
type mapping struct {
	value string
	from  *float64
	text  string
	color string
}

// mappings returns the panel's value mappings.
func (p panel) mappings() []mapping {
	var out []mapping
	type result struct {
		Text  string `json:"text"`
		Color string `json:"color"`
	}
	for _, m := range p.FieldConfig.Defaults.Mappings {
		switch m.Type {
		case "value":
			for v, raw := range m.Options {
				var r result
				if json.Unmarshal(raw, &r) == nil {
					out = append(out, mapping{value: v, text: r.Text, color: r.Color})
				}
			}
		case "range":
			var from *float64
			var r result
			_ = json.Unmarshal(m.Options["from"], &from)
			_ = json.Unmarshal(m.Options["result"], &r)
			out = append(out, mapping{from: from, text: r.Text, color: r.Color})
		}
	}
	slices.SortFunc(out, func(a, b mapping) int { return strings.Compare(a.value, b.value) })
	return out
}

// committedDashboard is the committed JSON's variables and panels (rows
// left out).
type committedDashboard struct {
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Query    string `json:"query"`
			AllValue string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func readCommitted(t *testing.T) committedDashboard {
	t.Helper()
	b, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	var d committedDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", committed, err)
	}
	d.Panels = slices.DeleteFunc(d.Panels, func(p panel) bool { return p.Type == "row" })
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", committed)
	}
	return d
}

// family is a metric of docs/reference/metrics.md.
type family struct {
	typ    string
	labels []string
}

// servedMetrics reads docs/reference/metrics.md: every family ipfailover
// serves, with its type and labels.
func servedMetrics(t *testing.T) map[string]family {
	t.Helper()
	f, err := os.Open(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z_:][a-z0-9_:]*)` \\| ([a-z]+) \\| ([^|]*) \\|")
	out := map[string]family{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var labels []string
		for l := range strings.SplitSeq(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		out[m[1]] = family{typ: m[2], labels: labels}
	}
	if len(out) == 0 {
		t.Fatalf("no metrics found in %s", metricsDoc)
	}
	return out
}

// targetLabels are the labels a scrape adds to every series (a PodMonitor's
// and the usual pod scrape configs'); instance is the target's, and a
// family's own instance label becomes exported_instance.
var targetLabels = []string{"job", "instance", "namespace", "pod", "exported_instance"}

// seriesOf finds the family of a series name (a histogram's _bucket, _sum
// and _count, a summary's _sum and _count) and the labels the series has.
func seriesOf(served map[string]family, name string) (family, []string, bool) {
	if f, ok := served[name]; ok && f.typ != "histogram" {
		return f, f.labels, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := served[base]
		if !ok || (f.typ != "histogram" && f.typ != "summary") || (suffix == "_bucket" && f.typ != "histogram") {
			continue
		}
		labels := slices.Clone(f.labels)
		if suffix == "_bucket" {
			labels = append(labels, "le")
		}
		return f, labels, true
	}
	return family{}, nil, false
}

var (
	// selectorName is a metric name with its label matchers: every
	// selector of the dashboard has some (the namespace).
	selectorName = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)
	// grouping is an aggregation's or a join's label list.
	grouping = regexp.MustCompile(`\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	// matcherLabel is a label a matcher names.
	matcherLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	// replacedLabel is the label a label_replace sets.
	replacedLabel = regexp.MustCompile(`"([a-zA-Z_][a-zA-Z0-9_]*)", "[^"]*", "[^"]*", "[^"]*"\)`)
	// legendLabel is a label a legend names.
	legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// TestQueriesNameServedMetrics: every metric a query names is one
// ipfailover serves (docs/reference/metrics.md), and every label a query
// matches on, groups by or puts in its legend is one of those metrics' or
// a scrape's. Prometheus itself checks more (TestDashboardOnAFleet); this
// runs anywhere.
func TestQueriesNameServedMetrics(t *testing.T) {
	served := servedMetrics(t)
	d := readCommitted(t)
	var missing []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			names := selectorName.FindAllStringSubmatch(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: no metric name with label matchers in %q", where, tg.Expr)
			}
			known := slices.Clone(targetLabels)
			unknown := false
			for _, n := range names {
				_, labels, ok := seriesOf(served, n[1])
				if !ok {
					missing = append(missing, n[1])
					unknown = true
					t.Errorf("%s names %s, which ipfailover does not serve (not in %s)", where, n[1], metricsDoc)
					continue
				}
				known = append(known, labels...)
			}
			if !strings.Contains(tg.Expr, ns) {
				t.Errorf("%s is not narrowed by the namespace variable (%s): %q", where, ns, tg.Expr)
			}
			if unknown {
				continue // its labels are unknown too
			}
			for _, m := range replacedLabel.FindAllStringSubmatch(tg.Expr, -1) {
				known = append(known, m[1])
			}
			var used []string
			for _, g := range grouping.FindAllStringSubmatch(tg.Expr, -1) {
				for l := range strings.SplitSeq(g[1], ",") {
					if l = strings.TrimSpace(l); l != "" {
						used = append(used, l)
					}
				}
			}
			for _, m := range matcherLabel.FindAllStringSubmatch(tg.Expr, -1) {
				used = append(used, m[1])
			}
			for _, m := range legendLabel.FindAllStringSubmatch(tg.Legend, -1) {
				used = append(used, m[1])
			}
			for _, l := range used {
				if !slices.Contains(known, l) {
					t.Errorf("%s uses label %q, which none of its metrics has: %q", where, l, tg.Expr)
				}
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Logf("missing from what ipfailover serves: %s", strings.Join(slices.Compact(missing), ", "))
	}
}
