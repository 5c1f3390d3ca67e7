package chaos

import (
	"context"
	"testing"
	"time"
)

// TestDownGuard replays what seed 2 did on the cluster when its faults ran
// minutes late behind stopped API servers: node2 dead and node3 drained
// when node1's pod was deleted, every VIP out for 7.8 s. The guard holds
// the third fault until one of the others is over, and a rollout until no
// node is down; faults that take no node down pass.
func TestDownGuard(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g := newDownGuard(3)
	death := Fault{Kind: NodeDeath, Nodes: []int{1}}
	drain := Fault{Kind: Drain, Nodes: []int{2}}
	for _, f := range []Fault{death, drain, {Kind: Partition, Nodes: []int{0, 1}}, {Kind: Segment}} {
		if waited, err := g.acquire(ctx, f); waited || err != nil {
			t.Fatalf("%s: waited %v, %v", f.Kind, waited, err)
		}
	}
	// Another fault on a node already down takes nothing more down.
	if waited, err := g.acquire(ctx, Fault{Kind: ServiceStop, Nodes: []int{2}}); waited || err != nil {
		t.Fatalf("service-stop on a drained node: waited %v, %v", waited, err)
	}
	g.release(Fault{Kind: ServiceStop, Nodes: []int{2}})
	got := make(chan bool)
	go func() {
		waited, err := g.acquire(ctx, Fault{Kind: PodDelete, Nodes: []int{0}})
		if err != nil {
			t.Error(err)
		}
		got <- waited
	}()
	select {
	case <-got:
		t.Fatal("pod-delete on node1 began with node2 dead and node3 drained")
	case <-time.After(100 * time.Millisecond):
	}
	g.release(drain)
	if !<-got {
		t.Error("pod-delete did not report that it waited")
	}
	rollout := make(chan error)
	go func() {
		_, err := g.acquire(ctx, Fault{Kind: Rollout})
		rollout <- err
	}()
	g.release(death)
	select {
	case err := <-rollout:
		t.Fatalf("the rollout began with node1's pod deleted (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.release(Fault{Kind: PodDelete, Nodes: []int{0}})
	if err := <-rollout; err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := g.acquire(short, Fault{Kind: LinkCut, Nodes: []int{0}}); err == nil {
		t.Error("a link cut began during a rollout")
	}
}
