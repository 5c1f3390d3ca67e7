package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

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
