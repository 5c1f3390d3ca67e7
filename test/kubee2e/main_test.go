// Package kubee2e runs deploy/'s manifests on a real Kubernetes cluster
// (test/kube, from make kube-up) as a user applies them, and checks what a
// user sees: a client in its own namespace connects to every VIP every
// 10 ms (TCP, to a service every node serves on the monitored port) while
// the pods are rolled out, deleted, drained, their nodes die and come back,
// their settings change; the cleanup Job leaves nothing behind; every
// Warning event the cluster records is one docs/troubleshooting.md explains.
//
// The tests share one cluster, in order, the one in the directory
// IPFAILOVER_KUBE names, and skip without it: make kube-test brings one up,
// runs them and removes it. Their bounds hold on a
// machine several times slower than this one; make bench measures the
// figures against the targets.
package kubee2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/test/kube"
	"github.com/ipfailover/ipfailover/test/lab"
)

var (
	// cluster is the cluster of make kube-up; nil when none is up.
	cluster *kube.Cluster
	// skipReason says why the tests skip.
	skipReason string
	// image is the ipfailover image the nodes imported.
	image string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		skipReason = "the test cluster's namespaces need root"
		return m.Run()
	}
	// Only on request: the tests change what runs in the cluster, which
	// may be a user's, up for trying the manifests.
	dir := os.Getenv("IPFAILOVER_KUBE")
	if dir == "" {
		skipReason = "IPFAILOVER_KUBE names no test cluster: make kube-test runs these tests (by hand: make kube-up, then IPFAILOVER_KUBE=$PWD/out/kube go test ./test/kubee2e)"
		return m.Run()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := kube.Attach(dir, log)
	if err != nil {
		skipReason = fmt.Sprintf("no test cluster (make kube-test brings one up): %v", err)
		return m.Run()
	}
	defer c.Close()
	// The image under test: IPFAILOVER_IMAGE, or the one ipfailover
	// image that is not the older one the upgrade cases start from.
	image = os.Getenv("IPFAILOVER_IMAGE")
	for _, ref := range c.State().Images {
		if image == "" && strings.Contains(ref, "ipfailover") && ref != os.Getenv("IPFAILOVER_OLD_IMAGE") {
			image = ref
		}
	}
	if image == "" {
		fmt.Fprintf(os.Stderr, "kubee2e: the cluster in %s has no ipfailover image (images %v): kubelab up -image\n", dir, c.State().Images)
		return 1
	}
	cluster = c
	return m.Run()
}

// The VIPs, the monitored port, and how the client probes.
const (
	vipsEnv = "192.0.2.100-102"
	// monitorPort is where every node's service listens (0.0.0.0), the
	// port the built-in check connects to.
	monitorPort = 8080
	// probeEvery is how often the client connects to each VIP.
	probeEvery = 10 * time.Millisecond
	// handoverBound bounds a planned handover's longest gap (rollout,
	// delete, drain): the priority-0 advert hands a VIP over in a few
	// hundredths of a second (make bench: at most 0.1 s); a second is a
	// VRRP timeout's third, so a handover that did not happen fails.
	handoverBound = time.Second
	// advert is the slow advert interval: multicast's, and a fleet's
	// with an older pod; waits that must cover every mode use it.
	advert = time.Second
	// fastAdvert is the manifests' advert interval with the peers from
	// the pods, every pod speaking it.
	fastAdvert = config.FastAdvertInterval
	// quiet is how long holders must stay put to count as settled: a
	// restarted node takes its preferred VIPs back about three advert
	// intervals after its keepalived started, a second or two after its
	// pod is Ready.
	quiet = 4 * advert
)

var vips = []netip.Addr{
	netip.MustParseAddr("192.0.2.100"),
	netip.MustParseAddr("192.0.2.101"),
	netip.MustParseAddr("192.0.2.102"),
}

// targets are the VIPs at the monitored port.
func targets(vs []netip.Addr) []netip.AddrPort {
	var out []netip.AddrPort
	for _, v := range vs {
		out = append(out, netip.AddrPortFrom(v, monitorPort))
	}
	return out
}

// need returns the cluster, or skips the test.
func need(t *testing.T) *kube.Cluster {
	t.Helper()
	if cluster == nil {
		t.Skip(skipReason)
	}
	return cluster
}

// overlay is the user's overlay of deploy/<base> the tests apply: the VIPs,
// one pod per node, the monitored port (docs/installation.md).
func overlay(base string, extra map[string]string) kube.Overlay {
	cfg := map[string]string{
		"OPENSHIFT_HA_VIRTUAL_IPS":   vipsEnv,
		"OPENSHIFT_HA_REPLICA_COUNT": "3",
		"OPENSHIFT_HA_MONITOR_PORT":  fmt.Sprint(monitorPort),
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return kube.Overlay{Base: base, Image: image, Config: cfg, Replicas: 3}
}

// services starts every node's monitored service and stops the ones in
// the map when the test ends (a subtest that stops one puts its
// replacement there).
func services(t *testing.T, c *kube.Cluster) map[string]*lab.Service {
	t.Helper()
	out := map[string]*lab.Service{}
	for _, n := range c.Nodes {
		s, err := lab.ListenIn(n.Netns, fmt.Sprintf("0.0.0.0:%d", monitorPort))
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name] = s
	}
	// The services running when the test ends: a subtest may replace one.
	t.Cleanup(func() {
		for _, s := range out {
			s.Stop()
		}
	})
	return out
}

// testContext is a context for one test, bounded.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
