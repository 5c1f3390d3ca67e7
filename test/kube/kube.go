// Package kube runs a real Kubernetes cluster on one machine for the tests,
// the benchmarks and anyone who wants to try deploy/'s manifests before a
// real cluster: a control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) in a network namespace of its
// own, and three nodes, each a network namespace on the lab's bridge
// (test/lab) with its own containerd, kubelet and kube-proxy, hostname,
// mounts and cgroups. Nothing is downloaded prebuilt: Kubernetes is built
// from the Go module proxy (test/kube/k8s), etcd, containerd, runc and the
// CNI plugins come from Debian, the pause image is built from the pause.c
// of the Kubernetes module, and the images are imported into each node's
// containerd.
//
// Up builds a cluster and leaves it running: its daemons outlive the
// process that started them, and a state file (State, in the cluster's
// directory) says where everything is. Attach returns the cluster of a state
// file to another process (a test binary); Down removes every process,
// namespace, mount, cgroup and file Up made and restores the global sysctls
// the kubelets change. The operations the scenarios need (a node's death
// and return, its daemons stopped and started, a frozen node, a cut link,
// the API server stopped) are plain methods, as are kubectl and the
// workload helpers (Overlay, RolloutRestart, Drain, ...).
//
// Addresses: the lab's (192.0.2.0/24, see test/lab); the control plane is
// the lab host "control-plane" at 192.0.2.2, the API server listens there on
// 6443 and, for the host, through a forwarder on 127.0.0.1. Pods that are
// not on the host network get 203.0.113.0/24 (a /26 per node, bridge CNI),
// Services 198.51.100.0/24; both TEST-NET ranges.
package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// Version is the Kubernetes release test/kube/k8s builds.
const Version = "v1.37.2"

// The cluster's address plan (see the package comment).
var (
	PodCIDR     = netip.MustParsePrefix("203.0.113.0/24")
	ServiceCIDR = netip.MustParsePrefix("198.51.100.0/24")
	// KubernetesService is the ClusterIP of the default/kubernetes Service.
	KubernetesService = netip.MustParseAddr("198.51.100.1")
)

// APIPort is where the API server listens on the control plane's address.
const APIPort = 6443

// ControlPlane is the lab host name of the control plane.
const ControlPlane = "control-plane"

// StateName is the state file's name in the cluster's directory.
const StateName = "cluster.json"

// State is what Up leaves behind for Down and for Attach: where everything
// is. It is written as JSON to Dir/cluster.json.
type State struct {
	// Name is the lab cluster's random suffix, part of every namespace
	// and cgroup name.
	Name string `json:"name"`
	// Dir holds the state file, the kubeconfigs, certificates, logs and
	// every node's files.
	Dir string `json:"dir"`
	// Parents are the directories above Dir that Up made, deepest first;
	// Down removes them when they are empty.
	Parents []string `json:"parents,omitempty"`
	// Bin holds the Kubernetes binaries, etcd and the pause image.
	Bin string `json:"bin"`
	// Kubeconfig is the administrator's kubeconfig for the host: the API
	// server through the forwarder on Server.
	Kubeconfig string `json:"kubeconfig"`
	// Server is the API server's URL on the host (127.0.0.1).
	Server string `json:"server"`
	// LabServer is the API server's URL in the lab's network, and
	// LabKubeconfig the administrator's kubeconfig there (for kubectl in
	// the client namespace, which Cluster.Kubectl runs).
	LabServer     string `json:"lab_server"`
	LabKubeconfig string `json:"lab_kubeconfig"`
	// Images are the image references imported into every node.
	Images []string `json:"images"`
	// ControlPlane and Client are the lab hosts of the control plane and
	// of the client tests probe from.
	ControlPlane Host `json:"control_plane"`
	Client       Host `json:"client"`
	// Nodes are the Kubernetes nodes.
	Nodes []Host `json:"nodes"`
	// Cgroup is the cgroup (in every hierarchy) that holds every process
	// of the cluster, one child per machine.
	Cgroup string `json:"cgroup"`
	// ServicePort is the port every node's service listens on (Options
	// Service), 0 for none.
	ServicePort int `json:"service_port,omitempty"`
	// Created is when Up began.
	Created time.Time `json:"created"`
}

// Host is one network namespace of the cluster as the state file records
// it.
type Host struct {
	// Name is the node name (and hostname), or the lab host's name.
	Name string `json:"name"`
	// Netns is the network namespace, under /run/netns.
	Netns string `json:"netns"`
	// Addr4 and Addr6 are the machine's addresses on eth0.
	Addr4 netip.Addr `json:"addr4"`
	Addr6 netip.Addr `json:"addr6"`
	// PodCIDR is a node's share of PodCIDR.
	PodCIDR netip.Prefix `json:"pod_cidr,omitzero"`
}

// readState reads a state file.
func readState(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if st.Name == "" || st.Dir == "" {
		return nil, fmt.Errorf("%s: not a cluster's state (no name or directory)", path)
	}
	return &st, nil
}

// write saves the state file atomically.
func (st *State) write() error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(st.Dir, StateName), append(data, '\n'))
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it over path, so that a reader polling path sees nothing or all of it,
// never an empty or partly written file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// DefaultDir is where make kube-up keeps the cluster: out/kube in the
// repository; the environment variable IPFAILOVER_KUBE names another
// directory.
func DefaultDir() (string, error) {
	if d := os.Getenv("IPFAILOVER_KUBE"); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "out", "kube"), nil
}

// RepoRoot is the repository's top directory (deploy/ is there), found
// from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cmd", "ipfailover")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kube: not inside the ipfailover repository")
		}
		dir = parent
	}
}
