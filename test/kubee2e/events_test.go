package kubee2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipfailover/ipfailover/test/kube"
)

// explained are the Warning events a test may see, by reason, each with
// the words of docs/troubleshooting.md ("Warning events you will see")
// that explain it; any other Warning fails the test.
var explained = map[string]struct {
	// readme is what docs/troubleshooting.md says about the reason, verbatim.
	readme string
	// when says in which situation the reason is expected; nil: always.
	when func(corev1.Event) bool
}{
	"Unhealthy": {
		readme: "`Unhealthy`, \"Readiness probe failed\", once as a pod starts",
		when: func(e corev1.Event) bool {
			return strings.HasPrefix(e.Message, "Readiness probe failed") &&
				(strings.Contains(e.Message, "connect: connection refused") || strings.Contains(e.Message, "statuscode: 503")) ||
				probedWhileRenumbered(e)
		},
	},
	"FailedScheduling": {
		readme: "`FailedScheduling` while a pod's replacement waits for its node",
		when: func(e corev1.Event) bool {
			return strings.Contains(e.Message, "didn't have free ports for the requested pod ports") ||
				strings.Contains(e.Message, "node(s) were unschedulable") ||
				strings.Contains(e.Message, "untolerated taint")
		},
	},
	"NodeNotReady": {
		readme: "`NodeNotReady` on the pods of a node that died",
		when:   func(e corev1.Event) bool { return e.Message == "Node is not ready" },
	},
	"Failed":            configmapCacheRace,
	"FailedMount":       configmapCacheRace,
	"MissingClusterDNS": {readme: "`MissingClusterDNS`: this cluster has no DNS"},
	// ipfailover's own, about the faults the tests make.
	"CheckFailing":        {readme: "`CheckFailing`: the check of `OPENSHIFT_HA_MONITOR_PORT` fails on that node"},
	"SplitBrain":          {readme: "`SplitBrain`: another host answers for a VIP the pod's node holds"},
	"KeepalivedRestarted": {readme: "`KeepalivedRestarted`: keepalived died"},
	"VIPReleased": {
		readme: "`VIPReleased` with FAULT",
		when:   func(e corev1.Event) bool { return strings.Contains(e.Message, "FAULT") },
	},
	"CgroupV1": {
		readme: "`CgroupV1`: this machine's cgroups",
		when:   func(e corev1.Event) bool { return e.InvolvedObject.Kind == "Node" },
	},
}

// renumbering is a node's address gone for a while (TestPeersFromPods).
type renumbering struct {
	addr     netip.Addr
	from, to time.Time
}

var (
	renumberedMu sync.Mutex
	renumbered   []renumbering
)

// renumberedFor records that addr was not the node's from from to to.
func renumberedFor(addr netip.Addr, from, to time.Time) {
	renumberedMu.Lock()
	defer renumberedMu.Unlock()
	renumbered = append(renumbered, renumbering{addr, from, to})
}

// probedWhileRenumbered: the kubelet probes a host-network pod at its
// node's address as the pod started with, and fails while that address is
// gone (docs/troubleshooting.md: "Its probes also fail while its node
// is renumbered"): a probe that began in the window (its timeout is 5 s).
func probedWhileRenumbered(e corev1.Event) bool {
	if !strings.HasPrefix(e.Message, "Readiness probe failed") && !strings.HasPrefix(e.Message, "Liveness probe failed") {
		return false
	}
	at := e.FirstTimestamp.Time
	renumberedMu.Lock()
	defer renumberedMu.Unlock()
	for _, r := range renumbered {
		if strings.Contains(e.Message, "http://"+r.addr.String()+":") &&
			!at.Before(r.from.Truncate(time.Second)) && !at.After(r.to.Add(6*time.Second)) {
			return true
		}
	}
	return false
}

// configmapCacheRace explains the kubelet's "failed to sync configmap
// cache", which it reports as Failed (the container's start) or as
// FailedMount (the volume's set-up) depending on what asked first, and its
// "object ... not registered" when a restarted kubelet sets a pod's
// volumes up before its ConfigMap watch knows the pod.
var configmapCacheRace = struct {
	readme string
	when   func(corev1.Event) bool
}{
	readme: "`Failed` or `FailedMount`, \"failed to sync configmap cache\"",
	when: func(e corev1.Event) bool {
		return strings.Contains(e.Message, "failed to sync configmap cache") ||
			e.Reason == "FailedMount" && strings.HasPrefix(e.Message, "MountVolume.SetUp failed") && strings.HasSuffix(e.Message, " not registered")
	},
}

// checkEvents fails on every Warning event since began that
// docs/troubleshooting.md does not explain, and on an explanation the page
// lacks.
func checkEvents(ctx context.Context, t *testing.T, c *kube.Cluster, since time.Time) {
	t.Helper()
	events, err := c.WarningEvents(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	root, err := kube.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(readme)), " ")
	counts := map[string]int{}
	for _, e := range events {
		what := fmt.Sprintf("%s %s/%s: %s (x%d)", e.Reason, strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, e.Message, max(1, e.Count))
		x, ok := explained[e.Reason]
		switch {
		case !ok:
			t.Errorf("Warning event docs/troubleshooting.md does not explain: %s", what)
		case x.when != nil && !x.when(e):
			t.Errorf("Warning event %s where it is not expected: %s", e.Reason, what)
		case !strings.Contains(flat, x.readme):
			t.Errorf("Warning event %s: docs/troubleshooting.md lacks its explanation %q", e.Reason, x.readme)
		default:
			counts[e.Reason]++
		}
	}
	if len(counts) > 0 {
		t.Logf("explained Warning events: %v", counts)
	}
}
