package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// StartOptions describe a program started on every node by StartAll.
type StartOptions struct {
	// Argv is the command, e.g. {"/path/to/ipfailover", "run"}.
	Argv []string
	// Env is the environment of every node's process (PATH added).
	Env []string
	// Out receives every node's output, each line prefixed with the node
	// name; nil discards. Outputs lists per-node copies as well.
	Out io.Writer
	// VIPs are the addresses that must end up with exactly one holder.
	VIPs []netip.Addr
	// Nodes restricts the start to these nodes; nil means all.
	Nodes []*Node
	// Quiet, when set, makes StartAll wait until the holders have not
	// changed for that long (see WaitStable), not just for one holder each.
	Quiet time.Duration
}

// Fleet is one program running on several nodes.
type Fleet struct {
	// Procs holds one process per node, in node order.
	Procs []*Process
	// Outputs holds each process's output, in node order.
	Outputs []*Output
	// Holders is the holder of each VIP once the fleet converged.
	Holders HolderMap
}

// Proc returns the fleet's process on node n, or nil.
func (f *Fleet) Proc(n *Node) *Process {
	for _, p := range f.Procs {
		if p.node == n {
			return p
		}
	}
	return nil
}

// StartAll starts opts.Argv on every node (ipfailover, typically) with the
// same environment and waits, until ctx ends, for every VIP in opts.VIPs to
// have exactly one holder. The processes live until ctx ends, they are
// stopped, or the cluster closes. On error the processes already started
// are killed.
func (c *Cluster) StartAll(ctx context.Context, opts StartOptions) (*Fleet, error) {
	if len(opts.VIPs) == 0 {
		return nil, errNoVIPs
	}
	nodes := opts.Nodes
	if nodes == nil {
		nodes = c.Nodes
	}
	f := &Fleet{}
	var mu sync.Mutex
	for _, n := range nodes {
		var copyTo io.Writer
		if opts.Out != nil {
			copyTo = PrefixWriter(opts.Out, &mu, n.Name+": ")
		}
		out := NewOutput(copyTo)
		p, err := n.Start(ctx, opts.Argv, opts.Env, out)
		if err != nil {
			f.kill()
			return nil, err
		}
		f.Procs = append(f.Procs, p)
		f.Outputs = append(f.Outputs, out)
	}
	alive := func(HolderMap) bool { return !slices.ContainsFunc(f.Procs, (*Process).Exited) }
	m, err := c.WaitOneHolder(ctx, opts.VIPs, alive)
	if err == nil && opts.Quiet > 0 {
		m, err = c.WaitStable(ctx, opts.VIPs, opts.Quiet)
		if err == nil && !alive(m) {
			err = errors.New("a process exited while the holders settled")
		}
	}
	if err != nil {
		f.kill()
		var exited []string
		for _, p := range f.Procs {
			if p.Exited() {
				code, _ := p.Wait(context.Background())
				exited = append(exited, fmt.Sprintf("%s exited %d", p.node.Name, code))
			}
		}
		if len(exited) > 0 {
			err = fmt.Errorf("%w (%s)", err, strings.Join(exited, ", "))
		}
		return nil, err
	}
	f.Holders = m
	return f, nil
}

func (f *Fleet) kill() {
	for _, p := range f.Procs {
		_ = p.Kill()
	}
	for _, p := range f.Procs {
		<-p.done
	}
}
