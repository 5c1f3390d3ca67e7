package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	ruleFile    = "components/alerts/prometheusrule.yaml"
	runbookBase = "https://github.com/ipfailover/ipfailover/blob/main/docs/monitoring.md#"
	// runbooks is the page runbookBase names, from deploy/.
	runbooks = "../docs/monitoring.md"
)

// promtoolTestFile is the part of promtool's test file the checks read.
type promtoolTestFile struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Name          string           `json:"name"`
		Interval      string           `json:"interval"`
		InputSeries   []map[string]any `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readRule(t *testing.T) *prometheusRule {
	t.Helper()
	data, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*prometheusRule)
}

func alertNames(r *prometheusRule) []string {
	var names []string
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			names = append(names, rule.Alert)
		}
	}
	return names
}

// TestAlertsAreDocumented: every alert has a severity, a summary and a
// runbook_url that points at its own section of docs/monitoring.md.
func TestAlertsAreDocumented(t *testing.T) {
	readme, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,4} (.+)$`).FindAllSubmatch(readme, -1) {
		headings[githubAnchor(string(m[1]))] = true
	}
	r := readRule(t)
	if len(alertNames(r)) == 0 {
		t.Fatal("no alerts")
	}
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				t.Errorf("group %s: a rule without alert: %q", g.Name, rule.Expr)
				continue
			}
			if s := rule.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", rule.Alert, s)
			}
			if rule.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", rule.Alert)
			}
			anchor := strings.ToLower(rule.Alert)
			if got := rule.Annotations["runbook_url"]; got != runbookBase+anchor {
				t.Errorf("%s: runbook_url %q, want %q", rule.Alert, got, runbookBase+anchor)
			}
			if !headings[anchor] {
				t.Errorf("%s: docs/monitoring.md has no section %q (a heading `### %s`)", rule.Alert, anchor, rule.Alert)
			}
		}
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestEveryAlertIsTested: the promtool tests hold, for each alert, a case
// that expects it to fire and one that expects it not to; and test no alert
// the rules lack.
func TestEveryAlertIsTested(t *testing.T) {
	tests := readPromtoolTests(t)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	names := alertNames(readRule(t))
	for _, n := range names {
		if !fires[n] {
			t.Errorf("%s: no promtool test expects it to fire", n)
		}
		if !quiet[n] {
			t.Errorf("%s: no promtool test expects it not to fire", n)
		}
	}
	for n := range fires {
		if !slices.Contains(names, n) {
			t.Errorf("promtool tests expect %s, which no rule defines", n)
		}
	}
	if !slices.Equal(tests.RuleFiles, []string{"ipfailover.rules.yaml"}) {
		t.Errorf("rule_files %v, want [ipfailover.rules.yaml] (written by this test)", tests.RuleFiles)
	}
}

func readPromtoolTests(t *testing.T) *promtoolTestFile {
	t.Helper()
	data, err := os.ReadFile(promtoolTests)
	if err != nil {
		t.Fatal(err)
	}
	var f promtoolTestFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("%s: %v", promtoolTests, err)
	}
	return &f
}

// TestAlertRulesWithPromtool runs `promtool test rules` on the
// PrometheusRule's groups: promtool checks every expression and template,
// and evaluates each test case. make test builds promtool (pinned) and
// passes it in PROMTOOL.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		var err error
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Skip("no promtool: `make test` builds it and sets PROMTOOL")
		}
	}
	r := readRule(t)
	groups, err := yaml.Marshal(map[string]any{"groups": r.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ipfailover.rules.yaml"), groups, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(promtoolTests)
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(dir, filepath.Base(promtoolTests))
	if err := os.WriteFile(testFile, tests, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", testFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("SUCCESS")) {
		t.Fatalf("promtool test rules printed no SUCCESS:\n%s", out)
	}
	t.Logf("%s", out)
}
