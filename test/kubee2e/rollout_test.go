package kubee2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/kube"
)

// rolloutState is the pods of a workload at one moment of a rollout.
type rolloutState struct {
	at time.Duration
	// oldReady and newReady name the nodes whose pod of the old or the
	// new template is Ready; unavailable counts the nodes with no Ready
	// pod.
	oldReady, newReady []string
	unavailable        int
}

func (s rolloutState) String() string {
	return fmt.Sprintf("%6.2fs  old ready on %v, new ready on %v, %d node(s) without a ready pod", s.at.Seconds(), s.oldReady, s.newReady, s.unavailable)
}

// watchRollout records every change of the workload's pods (by template
// hash, Deployment or DaemonSet) until stop is called.
func watchRollout(ctx context.Context, c *kube.Cluster, seen *[]rolloutState) (stop func()) {
	// The revisions running before the rollout, read before it begins: a
	// first look inside the goroutine, late on a busy machine, took the
	// first new pod for an old one.
	old := map[string]bool{}
	if pods, err := c.Pods(ctx, podLabel); err == nil {
		for _, p := range pods {
			old[p.Labels["pod-template-hash"]+p.Labels["controller-revision-hash"]] = true
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	began := time.Now()
	var mu sync.Mutex
	wg.Go(func() {
		var last string
		for done := false; !done; {
			// One last look once stopped: the rollout's end.
			done = ctx.Err() != nil
			pods, err := c.Pods(context.WithoutCancel(ctx), podLabel)
			if err == nil {
				st := rolloutState{at: time.Since(began)}
				ready := map[string]bool{}
				for _, p := range pods {
					hash := p.Labels["pod-template-hash"] + p.Labels["controller-revision-hash"]
					if p.DeletionTimestamp != nil || !kube.Ready(p) {
						continue
					}
					ready[p.Spec.NodeName] = true
					if old[hash] {
						st.oldReady = append(st.oldReady, p.Spec.NodeName)
					} else {
						st.newReady = append(st.newReady, p.Spec.NodeName)
					}
				}
				slices.Sort(st.oldReady)
				slices.Sort(st.newReady)
				st.unavailable = len(c.Nodes) - len(ready)
				key := fmt.Sprint(st.oldReady, st.newReady, st.unavailable)
				if key != last {
					mu.Lock()
					*seen = append(*seen, st)
					mu.Unlock()
					last = key
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// checkNodeByNode: the rollout replaced one node's pod at a time: never
// two nodes without a ready pod, every node's new pod ready in the end,
// and the new pods became ready one after another.
func checkNodeByNode(t *testing.T, seen []rolloutState) {
	t.Helper()
	if len(seen) == 0 {
		t.Fatal("the rollout was not seen")
	}
	var log []string
	prev := 0
	for _, s := range seen {
		log = append(log, s.String())
		if s.unavailable > 1 {
			t.Errorf("%d nodes without a ready pod at once: the rollout is not node by node", s.unavailable)
		}
		if len(s.newReady) > prev+1 {
			t.Errorf("%d new pods became ready at once", len(s.newReady)-prev)
		}
		prev = len(s.newReady)
	}
	last := seen[len(seen)-1]
	if len(last.newReady) != 3 || len(last.oldReady) != 0 {
		t.Errorf("the rollout ended with the new template on %v and the old on %v", last.newReady, last.oldReady)
	}
	t.Logf("the rollout, as the pods' readiness showed it:\n%s", strings.Join(log, "\n"))
}
