package chaos

import (
	"context"
	"sync"
)

// downGuard keeps the schedule's promise that some node stays up when
// faults run late. Plan keeps one node out of the faults that take nodes
// down, by their planned times; a fault whose nodes were busy starts late
// (on the cluster, a recovery that waits for a stopped API server delays
// what comes after by minutes), and could then take the last node down
// with the others. The guard holds such a fault until a node outside it
// is up, and a fault on every node (a rollout) until no node is down.
type downGuard struct {
	nodes int
	mu    sync.Mutex
	// changed is closed and replaced whenever a fault releases.
	changed chan struct{}
	down    map[int]int
	all     bool
}

func newDownGuard(nodes int) *downGuard {
	return &downGuard{nodes: nodes, changed: make(chan struct{}), down: map[int]int{}}
}

// fits reports whether f may take its nodes down now.
func (g *downGuard) fits(f Fault) bool {
	if g.all {
		return false
	}
	if kinds[f.Kind].all {
		return len(g.down) == 0
	}
	n := len(g.down)
	for _, i := range f.Nodes {
		if g.down[i] == 0 {
			n++
		}
	}
	return n < g.nodes
}

// acquire waits until f may take its nodes down and counts them down; it
// reports whether it waited. A fault that takes no node down passes.
func (g *downGuard) acquire(ctx context.Context, f Fault) (waited bool, err error) {
	if !kinds[f.Kind].down {
		return false, nil
	}
	for {
		g.mu.Lock()
		if g.fits(f) {
			if kinds[f.Kind].all {
				g.all = true
			}
			for _, i := range f.Nodes {
				g.down[i]++
			}
			g.mu.Unlock()
			return waited, nil
		}
		ch := g.changed
		g.mu.Unlock()
		waited = true
		select {
		case <-ch:
		case <-ctx.Done():
			return waited, ctx.Err()
		}
	}
}

// release counts f's nodes up again once they are back.
func (g *downGuard) release(f Fault) {
	if !kinds[f.Kind].down {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if kinds[f.Kind].all {
		g.all = false
	}
	for _, i := range f.Nodes {
		g.down[i]--
		if g.down[i] <= 0 {
			delete(g.down, i)
		}
	}
	close(g.changed)
	g.changed = make(chan struct{})
}
