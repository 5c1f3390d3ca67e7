package metrics

import (
	"bytes"
	"fmt"
	"github.com/ipfailover/ipfailover/internal/component"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipfailover/ipfailover/internal/splitbrain"
	"github.com/ipfailover/ipfailover/test/golden"
)

const (
	metricsDoc        = "../../docs/reference/metrics.md"
	metricsRegenerate = "go test ./internal/metrics -run TestMetricsReference -update"
)

// referenceSection is one table of docs/reference/metrics.md: the families
// an option of the Server adds to those it always serves.
type referenceSection struct {
	title, when string
	// prefix, when set, takes only the families whose names start with it.
	prefix string
	option func(*Options)
	// collector describes the families the option adds (nil: the
	// Server's own collector), so that none is missed for want of a
	// series.
	collector func(Options) prometheus.Collector
}

// referenceSections are the Server's options as cmd/ipfailover sets them,
// and when it does.
var referenceSections = []referenceSection{
	{
		title:  "keepalived",
		prefix: "keepalived_",
		when:   "Served whenever metrics are on, read from keepalived's JSON dump. The names, labels and help texts are keepalived_exporter's, so that its dashboards and alerts keep working without the exporter sidecar.",
	},
	{
		title:  "ipfailover",
		prefix: "ipfailover_",
		when:   "Served whenever metrics are on.",
	},
	{
		title:     "Built-in check",
		when:      "Served while ipfailover runs the built-in port check: `OPENSHIFT_HA_MONITOR_PORT` not 0 and no `OPENSHIFT_HA_CHECK_SCRIPT` (the default).",
		option:    func(o *Options) { o.Check = NewCheckMetrics() },
		collector: func(o Options) prometheus.Collector { return o.Check },
	},
	{
		title: "Takeovers",
		when:  "Served always: the VIP groups this node takes and gives up, as the split-brain guard tells them ([monitoring](../monitoring.md#takeovers)).",
		option: func(o *Options) {
			o.Takeovers = NewTakeoverMetrics()
			at := time.Unix(1700000000, 0)
			o.Takeovers.Took(splitbrain.Takeover{Instance: "X_VIP_1", At: at, Cause: splitbrain.CauseSilent, LastAdvert: at.Add(-600 * time.Millisecond), Announced: at.Add(time.Millisecond)})
			o.Takeovers.Released(splitbrain.Release{Instance: "X_VIP_1", At: at, Cause: splitbrain.ReleaseStop})
		},
		collector: func(o Options) prometheus.Collector { return o.Takeovers },
	},
	{
		title: "Split brain",
		when:  "Served always: the split-brain guard runs on every node.",
		option: func(o *Options) {
			mac, _ := net.ParseMAC("02:00:00:00:00:0b")
			o.SplitBrain = guardView{splitbrain.Snapshot{
				Duplicates:   map[netip.Addr][]net.HardwareAddr{netip.MustParseAddr("192.0.2.101"): {mac}},
				StrayRemoved: map[netip.Addr]uint64{netip.MustParseAddr("192.0.2.100"): 1},
				Announced:    map[netip.Addr]uint64{netip.MustParseAddr("192.0.2.101"): 1},
				Foreign:      []splitbrain.ForeignAdverts{{VRID: 51, Source: "192.0.2.99", Adverts: 1}},
				Peers:        []splitbrain.PeerHeard{{Addr: netip.MustParseAddr("192.0.2.12")}},
			}}
		},
		collector: func(o Options) prometheus.Collector { return newSplitBrainCollector(o.SplitBrain, o.Plan.Config.VIPs) },
	},
	{
		title: "Unicast peers from the pods",
		when:  "Served with `OPENSHIFT_HA_UNICAST_PEERS_FROM=pods`.",
		option: func(o *Options) {
			o.Membership = membershipView{MembershipStatus{Peers: map[string]int{"ipv4": 2}, LastChange: time.Unix(1700000000, 0), In: 3, Out: 1, WatchUp: true, AdvertInterval: 200 * time.Millisecond, VRRPVersion: 3}}
		},
		collector: func(o Options) prometheus.Collector { return newMembershipCollector(o.Membership) },
	},
	{
		title: "The run's components",
		when:  "Served always: one series per part of the run (internal/component), essential or auxiliary.",
		option: func(o *Options) {
			o.Components = func() []component.Health {
				return []component.Health{{Name: "split-brain-guard", Role: component.Auxiliary, Up: true}}
			}
		},
		collector: func(o Options) prometheus.Collector { return newComponentCollector(o.Components) },
	},
	{
		title:     "Address watch",
		when:      "Served always: the kernel's address notifications that the guard and the reloader follow.",
		option:    func(o *Options) { o.AddrWatch = watchStats{} },
		collector: func(o Options) prometheus.Collector { return newAddrWatchCollector(o.AddrWatch) },
	},
	{
		title:     "Multicast bridge",
		when:      "Served while the multicast bridge can run: with `OPENSHIFT_HA_UNICAST_PEERS_FROM=pods` (unless `OPENSHIFT_HA_MULTICAST_BRIDGE=false`), or with `OPENSHIFT_HA_MULTICAST_BRIDGE=true`.",
		option:    func(o *Options) { o.Bridge = bridgeView{on: true, sent: 1} },
		collector: func(o Options) prometheus.Collector { return newBridgeCollector(o.Bridge) },
	},
}

// family is one row of the reference.
type family struct {
	name, typ, help string
	labels          []string
}

// TestMetricsReference: docs/reference/metrics.md lists every family the
// Server serves, from a Server with every option on, a fake keepalived
// and in-memory sources.
func TestMetricsReference(t *testing.T) {
	golden.Check(t, metricsDoc, renderMetrics(t, referenceFamilies(t)), metricsRegenerate)
}

// TestMetricsReferenceDrift: a family renamed, relabelled or added no
// longer matches the committed reference, and the failure says how to
// regenerate it.
func TestMetricsReferenceDrift(t *testing.T) {
	sections := referenceFamilies(t)
	for _, tt := range []struct {
		name   string
		change func([][]family)
	}{
		{"renamed", func(s [][]family) { s[0][0].name += "_renamed" }},
		{"relabelled", func(s [][]family) { s[0][1].labels = append(s[0][1].labels, "node") }},
		{"added", func(s [][]family) { s[2] = append(s[2], family{name: "ipfailover_new", typ: "gauge", help: "New."}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			changed := make([][]family, len(sections))
			for i, s := range sections {
				changed[i] = slices.Clone(s)
				for j := range changed[i] {
					changed[i][j].labels = slices.Clone(changed[i][j].labels)
				}
			}
			tt.change(changed)
			err := golden.Compare(metricsDoc, renderMetrics(t, changed), metricsRegenerate)
			if err == nil {
				t.Fatal("the committed reference matched changed metrics")
			}
			if !strings.Contains(err.Error(), metricsRegenerate) {
				t.Errorf("the failure does not name the command that regenerates the file: %v", err)
			}
		})
	}
}

// referenceFamilies gathers the families of each section, in section
// order, and the Go runtime's and the process's last.
func referenceFamilies(t *testing.T) [][]family {
	f := startFake(t, "two-master.json")
	base := testOptions(newProcess(f.pid), f.dump)
	all := base
	for _, sec := range referenceSections {
		if sec.option != nil {
			sec.option(&all)
		}
	}
	served := gather(t, all)

	var out [][]family
	seen := map[string]bool{}
	for _, sec := range referenceSections {
		o := base
		if sec.option != nil {
			sec.option(&o)
		}
		var c prometheus.Collector = newServer(t, o).collector
		if sec.collector != nil {
			c = sec.collector(o)
		}
		var fams []family
		for _, name := range described(c) {
			if !strings.HasPrefix(name, sec.prefix) {
				continue
			}
			fam, ok := served[name]
			if !ok {
				t.Fatalf("%s: %s is described but not served by the reference's Server: give it a series", sec.title, name)
			}
			if !seen[name] {
				fams = append(fams, fam)
				seen[name] = true
			}
		}
		slices.SortFunc(fams, func(a, b family) int { return strings.Compare(a.name, b.name) })
		out = append(out, fams)
	}
	var runtime []family
	for name, fam := range served {
		switch {
		case seen[name]:
		case strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_"):
			runtime = append(runtime, fam)
		default:
			t.Errorf("%s is served but in no section of the reference", name)
		}
	}
	slices.SortFunc(runtime, func(a, b family) int { return strings.Compare(a.name, b.name) })
	return append(out, runtime)
}

// gather is every family a Server with options o serves, by name.
func gather(t *testing.T, o Options) map[string]family {
	t.Helper()
	mfs, err := newServer(t, o).registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		fam := family{name: mf.GetName(), typ: strings.ToLower(mf.GetType().String()), help: mf.GetHelp()}
		if mf.GetType() == dto.MetricType_GAUGE_HISTOGRAM {
			fam.typ = "gaugehistogram"
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(fam.labels, l.GetName()) {
					fam.labels = append(fam.labels, l.GetName())
				}
			}
		}
		slices.Sort(fam.labels)
		out[fam.name] = fam
	}
	return out
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// described lists the names of the families c describes.
func described(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// renderMetrics is docs/reference/metrics.md: a table per section, the
// Go runtime's and the process's families last.
func renderMetrics(t *testing.T, sections [][]family) []byte {
	t.Helper()
	if len(sections) != len(referenceSections)+1 {
		t.Fatalf("%d sections, want %d", len(sections), len(referenceSections)+1)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Code generated by `%s` from the Server's collectors; DO NOT EDIT. -->\n\n", metricsRegenerate)
	b.WriteString("# Metrics\n\n")
	b.WriteString("Every metric ipfailover serves on `/metrics` of `OPENSHIFT_HA_METRICS_ADDRESS` (`:9650` by default),\n")
	b.WriteString("as its collectors ([internal/metrics](../../internal/metrics)) describe them. This page is\n")
	fmt.Fprintf(&b, "rendered from them: after changing a metric, run `%s`.\n", metricsRegenerate)
	b.WriteString("A histogram's series are its `_bucket` (with `le`), `_sum` and `_count`.\n")
	titles := make([]string, 0, len(sections))
	for _, s := range referenceSections {
		titles = append(titles, s.title)
	}
	titles = append(titles, "Go runtime and process")
	for i, fams := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n", titles[i])
		if i < len(referenceSections) {
			b.WriteString(referenceSections[i].when + "\n\n")
		} else {
			b.WriteString("client_golang's standard Go and process collectors; their help texts come from the Go runtime and the library.\n\n")
		}
		b.WriteString("| name | type | labels | help |\n|---|---|---|---|\n")
		for _, f := range fams {
			labels := make([]string, len(f.labels))
			for j, l := range f.labels {
				labels[j] = "`" + l + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.name, f.typ, strings.Join(labels, ", "), strings.ReplaceAll(f.help, "|", `\|`))
		}
	}
	return b.Bytes()
}
