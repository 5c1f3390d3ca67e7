package kube

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// podLogs keeps the container logs of the workload's pods, as each node's
// kubelet writes them (/var/log/pods/<namespace>_<pod>_<uid>/<container>/
// <n>.log), under dir/<node>/ with the same relative paths, copying what
// was appended every interval: the kubelet deletes a pod's logs with the
// pod, and a run's miss is explained by its pods' own lines (keepalived's
// transitions and reloads, ipfailover's). What a pod wrote in its last
// interval before its deletion can be lost.
type podLogs struct {
	dir string
	// nodes maps a node's name to where the host sees its /var/log/pods.
	nodes     map[string]string
	namespace string
	every     time.Duration

	mu      sync.Mutex
	offsets map[string]int64 // by source path
}

func newPodLogs(dir, namespace string, nodes map[string]string, every time.Duration) *podLogs {
	return &podLogs{dir: dir, nodes: nodes, namespace: namespace, every: every, offsets: map[string]int64{}}
}

// KeepPodLogs copies the logs of namespace's pods on every node into
// dir/<node>/ every interval, until the returned function is called, which
// copies once more and returns when done.
func (c *Cluster) KeepPodLogs(dir, namespace string, every time.Duration) (stop func()) {
	nodes := map[string]string{}
	for _, m := range c.Nodes {
		nodes[m.Name] = m.PodLogs()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		newPodLogs(dir, namespace, nodes, every).run(ctx)
	}()
	return func() { cancel(); <-done }
}

// run copies every interval until ctx ends, then once more.
func (p *podLogs) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.copy()
			return
		case <-t.C:
			p.copy()
		}
	}
}

// copy appends what each log gained since the last copy; a log shorter
// than what was copied of it (rotated, or a new container's) is copied
// from its start.
func (p *podLogs) copy() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for node, root := range p.nodes {
		files, _ := filepath.Glob(filepath.Join(root, p.namespace+"_*", "*", "*.log"))
		for _, src := range files {
			rel, err := filepath.Rel(root, src)
			if err != nil {
				continue
			}
			n, err := appendFrom(src, filepath.Join(p.dir, node, rel), p.offsets[src])
			if err == nil {
				p.offsets[src] = n
			}
		}
	}
}

// appendFrom appends src from offset on to dst and returns src's length
// copied so far; src shorter than offset is copied from its start.
func appendFrom(src, dst string, offset int64) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return offset, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return offset, err
	}
	if fi.Size() < offset {
		offset = 0
	}
	if fi.Size() == offset {
		return offset, nil
	}
	if _, err := in.Seek(offset, io.SeekStart); err != nil {
		return offset, err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return offset, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return offset, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return offset + n, err
}
