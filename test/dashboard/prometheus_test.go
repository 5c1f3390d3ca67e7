package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// scrapeInterval is the lab Prometheus's: short, so that a run of a
// minute has series enough.
const scrapeInterval = time.Second

// rateInterval is what Grafana makes of $__rate_interval at that scrape
// interval: four scrapes.
const rateInterval = 4 * scrapeInterval

// prometheusBinary is the Prometheus server to run: $PROMETHEUS (make test
// builds it, pinned), or prometheus on the PATH; "" when there is none.
func prometheusBinary() string {
	if p := os.Getenv("PROMETHEUS"); p != "" {
		return p
	}
	p, _ := exec.LookPath("prometheus")
	return p
}

// promServer is a Prometheus server running in a lab host, scraping the
// nodes' metrics ports as a PodMonitor's job would.
type promServer struct {
	proc *lab.Process
	out  *lab.Output
	base string
	hc   *http.Client
}

// startPrometheus runs bin in host, scraping every node's :9650 with the
// labels a PodMonitor gives (job, namespace, pod), its files under dir.
func startPrometheus(ctx context.Context, bin string, host *lab.Node, nodes []*lab.Node, pod func(*lab.Node) string, dir string) (*promServer, error) {
	var targets strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&targets, "      - targets: ['%s:9650']\n        labels: {namespace: %s, pod: %s}\n", n.Addr4, podNamespace, pod(n))
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: %[2]s/ipfailover
    static_configs:
%[3]s`, scrapeInterval, podNamespace, targets.String())
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	listen := host.Addr4.String() + ":9090"
	out := lab.NewOutput(nil)
	// One thread of Go code: the machine runs other tests.
	p, err := host.Start(ctx, []string{bin,
		"--config.file=" + confPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + listen,
		"--log.level=warn",
	}, []string{"GOMAXPROCS=1"}, out)
	if err != nil {
		return nil, err
	}
	s := &promServer{proc: p, out: out, base: "http://" + listen,
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: host.Dial}}}
	// Ready, and scraping every node: Prometheus hands its scrapers the
	// targets some seconds after it starts.
	for {
		var targets struct {
			Active []struct {
				LastScrape time.Time `json:"lastScrape"`
			} `json:"activeTargets"`
		}
		err := s.api(ctx, "targets", url.Values{"state": {"active"}}, &targets)
		scraped := 0
		for _, t := range targets.Active {
			if t.LastScrape.After(time.Unix(0, 0)) {
				scraped++
			}
		}
		if err == nil && scraped == len(nodes) {
			return s, nil
		}
		if p.Exited() {
			return nil, fmt.Errorf("prometheus exited:\n%s", out)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for prometheus to scrape the nodes: %w (last: %v)\n%s", ctx.Err(), err, out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// api calls Prometheus's HTTP API and decodes its data.
func (s *promServer) api(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/api/v1/"+path+"?"+params.Encode(), http.NoBody)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// series is one series of a query's result: its labels and its samples
// (one for an instant query).
type series struct {
	Labels  map[string]string
	Samples []sample
}

type sample struct {
	At    time.Time
	Value float64
}

// finite reports whether the series has a value a panel draws (not NaN).
func (s series) finite() bool {
	for _, p := range s.Samples {
		if !math.IsNaN(p.Value) {
			return true
		}
	}
	return false
}

// promSample is Prometheus's [time, "value"].
type promSample [2]any

func (p promSample) sample() (sample, error) {
	ts, ok := p[0].(float64)
	str, ok2 := p[1].(string)
	if !ok || !ok2 {
		return sample{}, fmt.Errorf("sample %v", p)
	}
	v, err := strconv.ParseFloat(str, 64)
	return sample{At: time.UnixMilli(int64(math.Round(ts * 1000))), Value: v}, err
}

// queryRange runs a range query from start to end at step.
func (s *promServer) queryRange(ctx context.Context, q string, start, end time.Time, step time.Duration) ([]series, error) {
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Values []promSample      `json:"values"`
		} `json:"result"`
	}
	err := s.api(ctx, "query_range", url.Values{"query": {q}, "start": {unix(start)}, "end": {unix(end)}, "step": {step.String()}}, &data)
	if err != nil {
		return nil, err
	}
	var out []series
	for _, r := range data.Result {
		sr := series{Labels: r.Metric}
		for _, v := range r.Values {
			p, err := v.sample()
			if err != nil {
				return nil, err
			}
			sr.Samples = append(sr.Samples, p)
		}
		out = append(out, sr)
	}
	sortSeries(out)
	return out, nil
}

// query runs an instant query at t.
func (s *promServer) query(ctx context.Context, q string, t time.Time) ([]series, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.api(ctx, "query", url.Values{"query": {q}, "time": {unix(t)}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%q: a %s, want a vector", q, data.ResultType)
	}
	var result []struct {
		Metric map[string]string `json:"metric"`
		Value  promSample        `json:"value"`
	}
	if err := json.Unmarshal(data.Result, &result); err != nil {
		return nil, err
	}
	var out []series
	for _, r := range result {
		p, err := r.Value.sample()
		if err != nil {
			return nil, err
		}
		out = append(out, series{Labels: r.Metric, Samples: []sample{p}})
	}
	sortSeries(out)
	return out, nil
}

// selectors parses q with Prometheus's parser and returns its selectors:
// the metric name of each and its label matchers ("name op value").
func (s *promServer) selectors(ctx context.Context, q string) ([]selector, error) {
	var ast any
	if err := s.api(ctx, "parse_query", url.Values{"query": {q}}, &ast); err != nil {
		return nil, err
	}
	var out []selector
	var walk func(any)
	walk = func(n any) {
		switch v := n.(type) {
		case map[string]any:
			if t, _ := v["type"].(string); t == "vectorSelector" || t == "matrixSelector" {
				sel := selector{}
				sel.name, _ = v["name"].(string)
				ms, _ := v["matchers"].([]any)
				for _, m := range ms {
					mm, _ := m.(map[string]any)
					name, _ := mm["name"].(string)
					op, _ := mm["type"].(string)
					value, _ := mm["value"].(string)
					if name == "__name__" && op == "=" {
						sel.name = value
						continue
					}
					sel.matchers = append(sel.matchers, name+op+strconv.Quote(value))
				}
				out = append(out, sel)
				return
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(ast)
	if len(out) == 0 {
		return nil, errors.New("no selector")
	}
	return out, nil
}

// selector is one vector or matrix selector of a query.
type selector struct {
	name     string
	matchers []string
}

// names returns every metric name Prometheus has stored.
func (s *promServer) names(ctx context.Context) (map[string]bool, error) {
	var names []string
	if err := s.api(ctx, "label/__name__/values", url.Values{}, &names); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// labelValues returns the values of label on the series of match between
// start and end, as Grafana's label_values(match, label) lists them.
func (s *promServer) labelValues(ctx context.Context, label, match string, start, end time.Time) ([]string, error) {
	var values []string
	err := s.api(ctx, "label/"+label+"/values", url.Values{"match[]": {match}, "start": {unix(start)}, "end": {unix(end)}}, &values)
	return values, err
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

func sortSeries(ss []series) {
	sort.SliceStable(ss, func(i, j int) bool { return labelString(ss[i].Labels) < labelString(ss[j].Labels) })
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}
