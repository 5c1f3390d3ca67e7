package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// PollInterval is how often the Wait helpers look at the cluster.
const PollInterval = 50 * time.Millisecond

// Holders returns the nodes that hold vip: eth0 up and vip on it. A crashed
// node keeps its addresses but answers no ARP, so it holds nothing.
func (c *Cluster) Holders(vip netip.Addr) ([]*Node, error) {
	var holders []*Node
	for _, n := range c.Nodes {
		up, err := n.Up()
		if err != nil {
			return nil, err
		}
		if !up {
			continue
		}
		has, err := n.Has(vip)
		if err != nil {
			return nil, err
		}
		if has {
			holders = append(holders, n)
		}
	}
	return holders, nil
}

// Holder returns the single node holding vip, nil when none does, and an
// error when several do.
func (c *Cluster) Holder(vip netip.Addr) (*Node, error) {
	hs, err := c.Holders(vip)
	if err != nil {
		return nil, err
	}
	switch len(hs) {
	case 0:
		return nil, nil
	case 1:
		return hs[0], nil
	default:
		return nil, fmt.Errorf("%s held by %d nodes: %s", vip, len(hs), names(hs))
	}
}

func names(ns []*Node) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return strings.Join(s, ",")
}

// HolderMap is the holder of each VIP.
type HolderMap map[netip.Addr]*Node

// String lists "vip=node" pairs in address order.
func (m HolderMap) String() string {
	vips := slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
	var s []string
	for _, v := range vips {
		name := "none"
		if m[v] != nil {
			name = m[v].Name
		}
		s = append(s, v.String()+"="+name)
	}
	return strings.Join(s, " ")
}

// WaitOneHolder polls until every VIP has exactly one holder and cond (nil:
// none) accepts the holders, or ctx ends. On timeout the error describes
// the last state seen.
func (c *Cluster) WaitOneHolder(ctx context.Context, vips []netip.Addr, cond func(HolderMap) bool) (HolderMap, error) {
	var last string
	for {
		m, state, err := c.holderMap(vips)
		if err != nil {
			return nil, err
		}
		if m != nil && (cond == nil || cond(m)) {
			return m, nil
		}
		if state != last {
			c.log.Debug("waiting for one holder per VIP", "state", state)
			last = state
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for one holder per VIP: %w; last seen: %s", ctx.Err(), last)
		case <-time.After(PollInterval):
		}
	}
}

// WaitStable waits, until ctx ends, for one holder per VIP that stays the
// same for quiet (a few advert intervals): startup preemption is over and
// the holders are the ones the VRRP priorities chose.
func (c *Cluster) WaitStable(ctx context.Context, vips []netip.Addr, quiet time.Duration) (HolderMap, error) {
	prev, err := c.WaitOneHolder(ctx, vips, nil)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for stable holders: %w; last seen: %s", ctx.Err(), prev)
		case <-time.After(quiet):
		}
		m, err := c.WaitOneHolder(ctx, vips, nil)
		if err != nil {
			return nil, err
		}
		if maps.Equal(m, prev) {
			return m, nil
		}
		prev = m
	}
}

// holderMap returns the holders when each VIP has exactly one, else nil,
// plus a description of the state.
func (c *Cluster) holderMap(vips []netip.Addr) (HolderMap, string, error) {
	m := HolderMap{}
	ok := true
	var desc []string
	for _, v := range vips {
		hs, err := c.Holders(v)
		if err != nil {
			return nil, "", err
		}
		desc = append(desc, fmt.Sprintf("%s=[%s]", v, names(hs)))
		if len(hs) != 1 {
			ok = false
			continue
		}
		m[v] = hs[0]
	}
	if !ok {
		m = nil
	}
	return m, strings.Join(desc, " "), nil
}

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

// HTTPClient returns a client whose connections are made from the client
// namespace; URLs must use IP literals. Keep-alives are off, so every
// request opens a new connection and reaches the VIP's current holder.
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext:       c.Client.Dial,
			DisableKeepAlives: true,
		},
	}
}

// Get fetches url from the client namespace and returns the body.
func (c *Cluster) Get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// PrefixWriter returns a writer that copies whole lines to w, each with
// prefix. Writers that share mu never interleave their lines mid-line.
func PrefixWriter(w io.Writer, mu *sync.Mutex, prefix string) io.Writer {
	return LineWriter(mu, func(line []byte) error {
		_, err := io.WriteString(w, prefix+string(line))
		return err
	})
}

// LineWriter returns a writer that gathers what is written into lines and
// calls emit with each whole line, newline included, holding mu.
func LineWriter(mu *sync.Mutex, emit func(line []byte) error) io.Writer {
	return &lineWriter{mu: mu, emit: emit}
}

type lineWriter struct {
	mu      *sync.Mutex
	emit    func(line []byte) error
	partial []byte
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := slices.Index(l.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		if err := l.emit(l.partial[:i+1]); err != nil {
			return len(b), err
		}
		l.partial = l.partial[i+1:]
	}
}

// errNoVIPs keeps StartAll honest: waiting for nothing is a caller bug.
var errNoVIPs = errors.New("lab: no VIPs to wait for")
