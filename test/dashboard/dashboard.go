// Package dashboard is the Grafana dashboard that
// deploy/components/grafana-dashboard ships, written with the Grafana
// Foundation SDK: who holds each VIP, the failovers and their causes, the
// check, split brain, the VRRP the pods speak, keepalived's restarts and
// the entrypoint's resources, from the metrics of docs/reference/metrics.md.
//
// The committed JSON is what JSON returns, and docs/reference/dashboard.md
// lists its panels (make dashboard rewrites both); every query of it is
// run against a real Prometheus scraping a lab fleet through failovers
// (TestDashboardOnAFleet).
package dashboard

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The dashboard's identity, stable across versions so that an update
// replaces it in Grafana.
const (
	UID   = "ipfailover"
	Title = "ipfailover: VIPs and failovers"
)

// Variables the queries name: the Prometheus data source and the
// namespaces of the deployments shown (all of them by default).
const (
	DatasourceVar = "datasource"
	NamespaceVar  = "namespace"
)

// ns narrows every series to the namespaces chosen. "All" is ".*", which
// also matches series without a namespace label (a scrape job that does not
// set one).
const ns = `namespace=~"$namespace"`

// ours keeps the series of ipfailover's own targets: keepalived_* and
// process_* names are also those of keepalived_exporter (the
// keepalived-operator's) and of any Go program. Only ipfailover serves
// ipfailover_build_info. The alerts join the same way.
const ours = ` and on (job, instance) ipfailover_build_info{` + ns + `}`

// runbooks is the page that explains every metric and alert.
const runbooks = "https://github.com/ipfailover/ipfailover/blob/main/docs/monitoring.md"

// guardAction is the rises of one of the split-brain guard's counters, as
// series labelled action (only where it rose).
func guardAction(counter, action string) string {
	return `label_replace(sum by (vip, instance) (increase(` + counter + `{` + ns + `}[$__rate_interval])) > 0, "action", "` + action + `", "", "")`
}

// datasource is the data source every panel and query uses: the variable.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + DatasourceVar + "}")}
}

// query is a range query drawn with the legend.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource()).Expr(expr).LegendFormat(legend).Range()
}

// instant is a query evaluated once, at the end of the time range.
func instant(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource()).Expr(expr).LegendFormat(legend).Instant()
}

// refID names a panel's i-th query as Grafana does: A, B, ...
func refID(i int) string { return string(rune('A' + i)) }

// state is a value mapping: the value shown as text in the colour.
type state struct {
	value string
	text  string
	color string
}

// valueMappings maps exact values to texts and colours; a state with an
// empty value maps 2 and above (a count of nodes).
func valueMappings(states ...state) []dashboard.ValueMapping {
	exact := &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{}}
	var out []dashboard.ValueMapping
	for i, s := range states {
		res := dashboard.ValueMappingResult{Text: cog.ToPtr(s.text), Color: cog.ToPtr(s.color), Index: cog.ToPtr(int32(i))}
		if s.value == "" {
			out = append(out, dashboard.ValueMapping{RangeMap: &dashboard.RangeMap{Type: dashboard.MappingTypeRangeToText,
				Options: dashboard.DashboardRangeMapOptions{From: cog.ToPtr(2.0), To: nil, Result: res}}})
			continue
		}
		exact.Options[s.value] = res
	}
	return append([]dashboard.ValueMapping{{ValueMap: exact}}, out...)
}

// timeline is a state timeline: one row per series, coloured by the
// mappings.
func timeline(title, description string, h uint32, states []state, targets ...*prometheus.DataqueryBuilder) *statetimeline.PanelBuilder {
	p := statetimeline.NewPanelBuilder().Title(title).Description(description).Datasource(datasource()).Height(h).
		ShowValue(common.VisibilityModeAuto).MergeValues(true).FillOpacity(80).LineWidth(0).RowHeight(0.8).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(false).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).
			Steps([]dashboard.Threshold{{Value: nil, Color: "blue"}}))
	if len(states) > 0 {
		p.Mappings(valueMappings(states...))
	}
	for i, t := range targets {
		p.WithTarget(t.RefId(refID(i)))
	}
	return p
}

// graph is a time series panel of lines, or of stacked bars when bars is
// set (counts of events per interval, their total the bar's height).
func graph(title, description, unit string, h uint32, bars bool, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Datasource(datasource()).Height(h).Unit(unit).
		Min(0).FillOpacity(10).LineWidth(1).ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	if bars {
		p.DrawStyle(common.GraphDrawStyleBars).FillOpacity(80).
			Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal).Group("A"))
	}
	for i, t := range targets {
		p.WithTarget(t.RefId(refID(i)))
	}
	return p
}

// points is a time series panel that draws each value as a point: events
// that happen now and then.
func points(title, description, unit string, h uint32, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return graph(title, description, unit, h, false, targets...).DrawStyle(common.GraphDrawStylePoints).PointSize(8).
		ShowPoints(common.VisibilityModeAlways)
}

// gauges is a bar gauge of instant values over the whole time range.
func gauges(title, description, unit string, h uint32, targets ...*prometheus.DataqueryBuilder) *bargauge.PanelBuilder {
	p := bargauge.NewPanelBuilder().Title(title).Description(description).Datasource(datasource()).Height(h).Unit(unit).
		Min(0).DisplayMode(common.BarGaugeDisplayModeBasic).Orientation(common.VizOrientationHorizontal).
		ValueMode(common.BarGaugeValueModeText).ShowUnfilled(true).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdPaletteClassic))
	for i, t := range targets {
		p.WithTarget(t.RefId(refID(i)))
	}
	return p
}

// Dashboard builds the dashboard in Grafana's classic JSON model, which
// file provisioning (the sidecar), the Grafana operator's GrafanaDashboard
// and an import take on every Grafana release; the SDK's newer v2 model
// needs feature toggles of Grafana 12 and more, and the operator does not
// take it in a GrafanaDashboard.
//
//nolint:staticcheck // the classic model, on purpose (above)
func Dashboard() (dashboard.Dashboard, error) {
	d := dashboard.NewDashboardBuilder(Title)
	d.Uid(UID).
		Description("Who holds each VIP, the failovers and their causes, the check, split brain and keepalived, from the metrics ipfailover serves on :9650.").
		Tags([]string{"ipfailover", "keepalived", "vrrp"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-1h", "now").
		Refresh("30s").
		Timezone(common.TimeZoneBrowser).
		Link(dashboard.NewDashboardLinkBuilder("Metrics and runbooks").Type(dashboard.DashboardLinkTypeLink).Url(runbooks).TargetBlank(true).Icon("doc")).
		WithVariable(dashboard.NewDatasourceVariableBuilder(DatasourceVar).Label("Prometheus").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder(NamespaceVar).Label("Namespace").
			Description("The namespaces of the ipfailover deployments shown.").
			Datasource(datasource()).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(ipfailover_build_info, namespace)")}).
			Definition("label_values(ipfailover_build_info, namespace)").
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).IncludeAll(true).AllValue(".*").
			Current(dashboard.VariableOption{Selected: cog.ToPtr(true), Text: dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}}, Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}}}))

	d.WithRow(dashboard.NewRowBuilder("VIPs"))
	d.WithPanel(timeline("Holder of each VIP",
		"Which node has each VIP on its interface, as the kernel says (ipfailover_vip_held): a row per VIP and node. A VIP that moves shows as its colour passing from one row to another.",
		9, []state{{"0", "", "transparent"}, {"1", "held", "green"}},
		query(`max by (vip, instance) (ipfailover_vip_held{`+ns+`})`, "{{vip}} {{instance}}")).Span(16))
	d.WithPanel(timeline("Nodes holding each VIP",
		"How many nodes have each VIP: one, none (IPFailoverVIPNoHolder after a minute) or more (a split brain: IPFailoverVIPHeldTwice).",
		9, []state{{"0", "none", "red"}, {"1", "one", "green"}, {"", "two or more", "orange"}},
		query(`sum by (vip) (ipfailover_vip_held{`+ns+`})`, "{{vip}}")).Span(8))
	d.WithPanel(timeline("VRRP state of each instance",
		"keepalived's state of each VRRP instance on each node (keepalived_vrrp_state). FAULT: the check fails there, and the node holds none of the instance's VIPs.",
		8, []state{{"0", "INIT", "text"}, {"1", "BACKUP", "blue"}, {"2", "MASTER", "green"}, {"3", "FAULT", "red"}},
		query(`max by (name, instance) (keepalived_vrrp_state{`+ns+`}`+ours+`)`, "{{name}} {{instance}}")).Span(24))

	d.WithRow(dashboard.NewRowBuilder("Failovers"))
	d.WithPanel(graph("VIP moves by cause",
		"VIP groups (VRRP instances) the nodes took and gave up, by cause (ipfailover_vip_moves_total). Taken: start (nobody held it), handover (the master said goodbye: it stopped, or its check failed), silent (the master fell silent: a dead, frozen or cut-off node), preemption (a node took back what it prefers). Given up: stop, fault (the check failed), higher-priority. A move shows on both nodes.",
		"short", 8, true,
		query(`sum by (direction, cause) (increase(ipfailover_vip_moves_total{`+ns+`}[$__rate_interval]))`, "{{direction}} ({{cause}})")).Span(12))
	d.WithPanel(gauges("VIP moves in the time range",
		"The moves of the whole time range, by direction and cause.",
		"short", 8,
		instant(`round(sum by (direction, cause) (increase(ipfailover_vip_moves_total{`+ns+`}[$__range])))`, "{{direction}} ({{cause}})")).Span(12))
	d.WithPanel(points("Takeover times",
		"How long the takeovers took, by cause: from the last advert the taking node heard from the previous master to its MASTER transition (master) and to its first gratuitous ARP or neighbour advertisement (announced) (ipfailover_takeover_seconds; a start is not timed). A point is the mean of the takeovers in its interval; a client's outage is about the announced stage.",
		"s", 8,
		query(`sum by (stage, cause) (increase(ipfailover_takeover_seconds_sum{`+ns+`}[$__rate_interval])) / sum by (stage, cause) (increase(ipfailover_takeover_seconds_count{`+ns+`}[$__rate_interval]))`, "{{stage}} ({{cause}})")).Span(12))
	d.WithPanel(gauges("Takeover time quantiles in the time range",
		"The median, 90th and 99th percentiles of the takeovers of the whole time range, to MASTER and to the first announcement (ipfailover_takeover_seconds).",
		"s", 8,
		instant(`histogram_quantile(0.5, sum by (le, stage) (increase(ipfailover_takeover_seconds_bucket{`+ns+`}[$__range])))`, "p50 {{stage}}"),
		instant(`histogram_quantile(0.9, sum by (le, stage) (increase(ipfailover_takeover_seconds_bucket{`+ns+`}[$__range])))`, "p90 {{stage}}"),
		instant(`histogram_quantile(0.99, sum by (le, stage) (increase(ipfailover_takeover_seconds_bucket{`+ns+`}[$__range])))`, "p99 {{stage}}")).Span(12))

	d.WithRow(dashboard.NewRowBuilder("Check"))
	d.WithPanel(graph("Check probe time",
		"How long the built-in check's connects to OPENSHIFT_HA_MONITOR_PORT take on each node (ipfailover_check_duration_seconds, probes that succeeded). A slow service delays a failover no more than the probe timeout; a failing check moves the node's VIPs.",
		"s", 8, false,
		query(`histogram_quantile(0.5, sum by (le, instance) (rate(ipfailover_check_duration_seconds_bucket{`+ns+`, result="success"}[$__rate_interval])))`, "p50 {{instance}}"),
		query(`histogram_quantile(0.99, sum by (le, instance) (rate(ipfailover_check_duration_seconds_bucket{`+ns+`, result="success"}[$__rate_interval])))`, "p99 {{instance}}")).Span(12))
	d.WithPanel(timeline("Check passing",
		"Whether the built-in check passes on each node (ipfailover_check_up). While it fails, the node holds no VIP.",
		8, []state{{"0", "fails", "red"}, {"1", "passes", "green"}},
		query(`min by (instance) (ipfailover_check_up{`+ns+`})`, "{{instance}}")).Span(12))

	d.WithRow(dashboard.NewRowBuilder("Split brain"))
	d.WithPanel(timeline("Another host answers for a VIP",
		"A row per VIP and the MAC of another host that answers ARP or neighbour discovery for it while a node holds it (ipfailover_vip_duplicate): the VIP is on two hosts (IPFailoverVIPDuplicate).",
		8, []state{{"0", "", "green"}, {"1", "answered by another host", "red"}},
		query(`max by (vip, mac) (ipfailover_vip_duplicate{`+ns+`})`, "{{vip}} {{mac}}")).Span(8))
	d.WithPanel(timeline("Peers heard",
		"Whether each pod hears each unicast peer's VRRP (ipfailover_peer_heard): silent for 3 s, protocol 112 from that peer does not arrive, and both may hold the same VIPs (IPFailoverPeerSilent). With the peers from the pods only.",
		8, []state{{"0", "silent", "red"}, {"1", "heard", "green"}},
		query(`min by (instance, peer) (ipfailover_peer_heard{`+ns+`})`, "{{instance}} hears {{peer}}")).Span(8))
	d.WithPanel(graph("Foreign VRRP adverts",
		"Adverts for this deployment's router ids from a speaker outside it, by source (ipfailover_vrrp_foreign_adverts_total): another VRRP deployment on the router ids (IPFailoverForeignVRRPAdverts).",
		"pps", 8, false,
		query(`sum by (source, vrid, instance) (rate(ipfailover_vrrp_foreign_adverts_total{`+ns+`}[$__rate_interval]))`, "{{source}} vrid {{vrid}} at {{instance}}")).Span(8))
	d.WithPanel(graph("Split-brain guard actions",
		"What the guard did, by VIP and node: removed a VIP from a node that was not master of it (IPFailoverStrayVIPRemoved), put one back on a master without it (IPFailoverVIPRestored), announced one again after another host stopped answering for it.",
		"short", 8, true,
		query(guardAction("ipfailover_vip_stray_removed_total", "removed")+" or "+
			guardAction("ipfailover_vip_restored_total", "put back")+" or "+
			guardAction("ipfailover_vip_announcements_total", "announced again"),
			"{{vip}} {{action}} at {{instance}}")).Span(12))
	d.WithPanel(graph("Unicast peers",
		"The peers each pod's keepalived runs with (ipfailover_membership_peers): the other pods, and for a minute those that went. With the peers from the pods only.",
		"short", 8, false,
		query(`sum by (instance) (ipfailover_membership_peers{`+ns+`})`, "{{instance}}")).Span(12))

	d.WithRow(dashboard.NewRowBuilder("VRRP"))
	d.WithPanel(timeline("Advert interval",
		"The advert interval each pod's keepalived runs with (ipfailover_advert_interval_seconds). With the peers from the pods only.",
		8, nil,
		query(`max by (instance) (ipfailover_advert_interval_seconds{`+ns+`})`, "{{instance}}")).Unit("s").Span(8))
	d.WithPanel(timeline("VRRP version",
		"The VRRP version each pod speaks for IPv4 (ipfailover_vrrp_version). Pods at different versions do not hear each other (IPFailoverVRRPVersionMixed). With the peers from the pods only.",
		8, []state{{"2", "VRRPv2", "orange"}, {"3", "VRRPv3", "green"}},
		query(`max by (instance) (ipfailover_vrrp_version{`+ns+`})`, "{{instance}}")).Span(8))
	d.WithPanel(graph("Adverts sent and received",
		"VRRP adverts each node's keepalived sends (as master) and receives (keepalived_vrrp_advert_sent, keepalived_vrrp_advert_rcvd).",
		"pps", 8, false,
		query(`sum by (instance) (rate(keepalived_vrrp_advert_sent{`+ns+`}[$__rate_interval])`+ours+`)`, "sent {{instance}}"),
		query(`sum by (instance) (rate(keepalived_vrrp_advert_rcvd{`+ns+`}[$__rate_interval])`+ours+`)`, "received {{instance}}")).Span(8))

	d.WithRow(dashboard.NewRowBuilder("keepalived and the entrypoint"))
	d.WithPanel(graph("keepalived restarts",
		"keepalived started again by the entrypoint after it exited on its own (ipfailover_keepalived_restarts_total): each drops the node's VIPs until VRRP moves them (IPFailoverKeepalivedRestarting).",
		"short", 8, true,
		query(`sum by (instance) (increase(ipfailover_keepalived_restarts_total{`+ns+`}[$__rate_interval])) > 0`, "{{instance}}")).Span(6))
	d.WithPanel(graph("Entrypoint uptime",
		"Time since each node's entrypoint started (process_start_time_seconds): a drop to zero is a new container, after a rollout, a deleted pod or a crash (IPFailoverCrashLooping).",
		"s", 8, false,
		query(`max by (instance) (time() - process_start_time_seconds{`+ns+`}`+ours+`)`, "{{instance}}")).Span(6))
	d.WithPanel(graph("Entrypoint CPU",
		"CPU the entrypoint uses, in cores (process_cpu_seconds_total). keepalived's own is not exported: the container's (cAdvisor) counts both.",
		"percentunit", 8, false,
		query(`sum by (instance) (rate(process_cpu_seconds_total{`+ns+`}[$__rate_interval])`+ours+`)`, "{{instance}}")).Span(6))
	d.WithPanel(graph("Entrypoint memory",
		"The entrypoint's resident memory (process_resident_memory_bytes). keepalived's own is not exported: the container's (cAdvisor) counts both.",
		"bytes", 8, false,
		query(`max by (instance) (process_resident_memory_bytes{`+ns+`}`+ours+`)`, "{{instance}}")).Span(6))

	built, err := d.Build()
	if err != nil {
		return built, err
	}
	// Panel ids in order, rows included: Grafana links to a panel by its
	// id, so they must be unique and stay put.
	for i := range built.Panels {
		id := uint32(i + 1)
		if r := built.Panels[i].RowPanel; r != nil {
			r.Id = id
		}
		if p := built.Panels[i].Panel; p != nil {
			p.Id = &id
		}
	}
	return built, nil
}

// JSON is the dashboard as Grafana imports it, indented, with a final
// newline.
func JSON() ([]byte, error) {
	d, err := Dashboard()
	if err != nil {
		return nil, fmt.Errorf("building the dashboard: %w", err)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
