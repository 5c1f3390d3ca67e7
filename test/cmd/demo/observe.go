package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// pollEvery is how often the timings look at the kernel's addresses.
const pollEvery = 5 * time.Millisecond

// holders maps each VIP to the nodes whose eth0 is up and carries it, read
// with netlink in every node's namespace.
type holders map[netip.Addr][]*lab.Node

// observe reads the addresses of every node once.
func observe(c *lab.Cluster, vips []netip.Addr) (holders, error) {
	return c.HoldersOf(vips)
}

// one returns the single holder of vip, or nil when there are none or
// several.
func (h holders) one(vip netip.Addr) *lab.Node {
	if len(h[vip]) != 1 {
		return nil
	}
	return h[vip][0]
}

// held lists the VIPs n holds, in address order.
func (h holders) held(n *lab.Node) []netip.Addr {
	var out []netip.Addr
	for v, ns := range h {
		if slices.Contains(ns, n) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func (h holders) String() string {
	vips := slices.SortedFunc(maps.Keys(h), netip.Addr.Compare)
	var s []string
	for _, v := range vips {
		var names []string
		for _, n := range h[v] {
			names = append(names, n.Name)
		}
		s = append(s, fmt.Sprintf("%s=[%s]", v, strings.Join(names, ",")))
	}
	return strings.Join(s, " ")
}

// nodeMetrics is what a node's ipfailover reports on :9650.
type nodeMetrics struct {
	// State is keepalived_vrrp_state per instance name.
	State map[string]string
	// Instance is the instance of each VIP (ipfailover_vip_held).
	Instance map[netip.Addr]string
	// Restarts is ipfailover_keepalived_restarts_total.
	Restarts string
	// Duplicate lists, per VIP in conflict, the other hosts' MACs
	// (ipfailover_vip_duplicate 1); nil when there is none.
	Duplicate map[netip.Addr][]string
	// StrayRemoved is ipfailover_vip_stray_removed_total over all VIPs.
	StrayRemoved int
}

var (
	sampleRE = regexp.MustCompile(`^(\w+)(?:\{([^}]*)\})?\s+(\S+)`)
	labelRE  = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)
)

// vrrpStates are keepalived_vrrp_state's values.
var vrrpStates = map[string]string{"0": "INIT", "1": "BACKUP", "2": "MASTER", "3": "FAULT"}

// scrape reads a node's /metrics from the client namespace.
func scrape(ctx context.Context, c *lab.Cluster, n *lab.Node) (nodeMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s:9650/metrics", n.Addr4)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nodeMetrics{}, err
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return nodeMetrics{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nodeMetrics{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return nodeMetrics{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(string(body)), nil
}

// parseMetrics reads the samples the demo shows from a /metrics page.
func parseMetrics(page string) nodeMetrics {
	m := nodeMetrics{State: map[string]string{}, Instance: map[netip.Addr]string{}}
	for line := range strings.SplitSeq(page, "\n") {
		s := sampleRE.FindStringSubmatch(line)
		if s == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(s[2], -1) {
			labels[l[1]] = l[2]
		}
		switch s[1] {
		case "keepalived_vrrp_state":
			st, ok := vrrpStates[s[3]]
			if !ok {
				st = s[3]
			}
			m.State[labels["name"]] = st
		case "ipfailover_keepalived_restarts_total":
			m.Restarts = s[3]
		case "ipfailover_vip_held":
			if v, err := netip.ParseAddr(labels["vip"]); err == nil {
				m.Instance[v] = labels["instance"]
			}
		case "ipfailover_vip_duplicate":
			if v, err := netip.ParseAddr(labels["vip"]); err == nil && s[3] == "1" {
				if m.Duplicate == nil {
					m.Duplicate = map[netip.Addr][]string{}
				}
				m.Duplicate[v] = append(m.Duplicate[v], labels["mac"])
			}
		case "ipfailover_vip_stray_removed_total":
			if n, err := strconv.Atoi(s[3]); err == nil {
				m.StrayRemoved += n
			}
		}
	}
	return m
}

// get fetches url from the client namespace and returns the trimmed body.
func get(ctx context.Context, c *lab.Cluster, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, err := c.Get(ctx, url)
	return strings.TrimSpace(body), err
}
