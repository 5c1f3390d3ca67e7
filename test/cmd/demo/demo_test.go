package main

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// testdata/metrics.txt and testdata/keepalived.conf were captured from the
// real ipfailover on a node with address .12 and the demo's settings.

func TestParseMetrics(t *testing.T) {
	page, err := os.ReadFile("testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := parseMetrics(string(page))
	want := nodeMetrics{
		State: map[string]string{"demo_VIP_1": "MASTER", "demo_VIP_2": "MASTER", "demo_VIP_3": "MASTER"},
		Instance: map[netip.Addr]string{
			netip.MustParseAddr("192.0.2.100"): "demo_VIP_1",
			netip.MustParseAddr("192.0.2.101"): "demo_VIP_2",
			netip.MustParseAddr("192.0.2.102"): "demo_VIP_3",
		},
		Restarts: "0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseMetrics (-want +got):\n%s", diff)
	}
}

func TestParseMetricsStates(t *testing.T) {
	page := `# HELP keepalived_vrrp_state State of vrrp
keepalived_vrrp_state{intf="eth0",name="a",vrid="11"} 0
keepalived_vrrp_state{intf="eth0",name="b",vrid="12"} 1
keepalived_vrrp_state{intf="eth0",name="c",vrid="13"} 3
keepalived_vrrp_state{intf="eth0",name="d",vrid="14"} 7
ipfailover_keepalived_restarts_total 2
`
	got := parseMetrics(page)
	want := map[string]string{"a": "INIT", "b": "BACKUP", "c": "FAULT", "d": "7"}
	if diff := cmp.Diff(want, got.State); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	if got.Restarts != "2" {
		t.Errorf("restarts = %q, want 2", got.Restarts)
	}
}

// TestReadsTheDemosConf: the demo reads a node's priorities and start
// states through keepalived.Parse.
func TestReadsTheDemosConf(t *testing.T) {
	text, err := os.ReadFile("testdata/keepalived.conf")
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := keepalived.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	c := nodeConf{text: string(text), Conf: parsed}
	for _, tt := range []struct {
		name   string
		prio   int
		master bool
	}{{"demo_VIP_1", 249, true}, {"demo_VIP_2", 253, true}, {"demo_VIP_3", 249, true}} {
		if prio, ok := c.priority(tt.name); !ok || prio != tt.prio || c.master(tt.name) != tt.master {
			t.Errorf("%s: priority %d %v master %v, want %d MASTER %v", tt.name, prio, ok, c.master(tt.name), tt.prio, tt.master)
		}
	}
	if _, ok := c.priority("nope"); ok || c.master("nope") {
		t.Error("an instance the node does not run has a priority or is MASTER")
	}
}

func TestPrefixedWritesWholeLines(t *testing.T) {
	var out strings.Builder
	d := &demo{out: &out}
	w := d.stream("node1 web")
	for _, chunk := range []string{"one\ntw", "o\n", "three"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	want := "    | node1 web: one\n    | node1 web: two\n"
	if got := out.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestParseMetricsSplitBrain(t *testing.T) {
	page := `ipfailover_vip_duplicate{mac="",vip="192.0.2.100"} 0
ipfailover_vip_duplicate{mac="02:00:00:00:00:0b",vip="192.0.2.101"} 1
ipfailover_vip_duplicate{mac="02:00:00:00:00:0c",vip="192.0.2.101"} 1
ipfailover_vip_stray_removed_total{vip="192.0.2.100"} 2
ipfailover_vip_stray_removed_total{vip="192.0.2.101"} 1
`
	got := parseMetrics(page)
	want := map[netip.Addr][]string{netip.MustParseAddr("192.0.2.101"): {"02:00:00:00:00:0b", "02:00:00:00:00:0c"}}
	if diff := cmp.Diff(want, got.Duplicate); diff != "" {
		t.Errorf("duplicates (-want +got):\n%s", diff)
	}
	if got.StrayRemoved != 3 {
		t.Errorf("stray removals %d, want 3", got.StrayRemoved)
	}
}
