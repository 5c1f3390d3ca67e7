package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kubectl runs the cluster's kubectl as the administrator, from the lab's
// client namespace, and returns its standard output. An error quotes its
// standard error.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return c.KubectlInput(ctx, nil, args...)
}

// KubectlInput is Kubectl with stdin (for apply -f -).
func (c *Cluster) KubectlInput(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	argv := append([]string{"--net=/run/netns/" + c.st.Client.Netns, "--",
		filepath.Join(c.st.Bin, "kubectl"), "--kubeconfig", c.st.LabKubeconfig}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// KubectlJSON runs kubectl with -o json and decodes its output into v.
func (c *Cluster) KubectlJSON(ctx context.Context, v any, args ...string) error {
	out, err := c.Kubectl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("kubectl %s: decoding: %w", strings.Join(args, " "), err)
	}
	return nil
}

// NodeStatus returns, for every registered node, whether it is Ready.
func (c *Cluster) NodeStatus(ctx context.Context) (map[string]bool, error) {
	var list corev1.NodeList
	if err := c.KubectlJSON(ctx, &list, "get", "nodes"); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range list.Items {
		out[n.Name] = false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				out[n.Name] = true
			}
		}
	}
	return out, nil
}

// WaitNodesUntainted waits until every node is Ready and carries none of
// the NoExecute taints the node controller sets on a node it has not heard
// from (node.kubernetes.io/not-ready, node.kubernetes.io/unreachable). Past
// that, the taint eviction controller evicts nothing more for them: every
// eviction it was going to make is made.
func (c *Cluster) WaitNodesUntainted(ctx context.Context) error {
	if err := c.WaitNodesReady(ctx); err != nil {
		return err
	}
	return poll(ctx, 3*time.Minute, "no node tainted not-ready or unreachable", func() (bool, error) {
		var list corev1.NodeList
		if err := c.KubectlJSON(ctx, &list, "get", "nodes"); err != nil {
			return false, nil
		}
		for _, n := range list.Items {
			for _, taint := range n.Spec.Taints {
				if taint.Effect == corev1.TaintEffectNoExecute &&
					(taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// WatchGone watches the pods of selector in namespace and notes when each
// is deleted from the API server, as a watching client learns it (the
// moment a pod vanishes for every other watch). gone returns the time a
// pod was seen deleted, waiting for it up to a minute; stop ends the
// watch.
func (c *Cluster) WatchGone(ctx context.Context, namespace, selector string) (gone func(pod string) (time.Time, bool), stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+c.st.Client.Netns, "--",
		filepath.Join(c.st.Bin, "kubectl"), "--kubeconfig", c.st.LabKubeconfig,
		"-n", namespace, "get", "pods", "-l", selector, "--watch-only", "--output-watch-events", "--no-headers")
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, nil, err
	}
	var mu sync.Mutex
	seen := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			now := time.Now()
			// EVENT NAME READY STATUS RESTARTS AGE
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "DELETED" {
				mu.Lock()
				seen[f[1]] = now
				mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	gone = func(pod string) (time.Time, bool) {
		limit := time.After(time.Minute)
		for {
			mu.Lock()
			t, ok := seen[pod]
			mu.Unlock()
			if ok {
				return t, true
			}
			select {
			case <-ctx.Done():
				return time.Time{}, false
			case <-done:
				return time.Time{}, false
			case <-limit:
				return time.Time{}, false
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	stop = func() {
		cancel()
		<-done
	}
	return gone, stop, nil
}
