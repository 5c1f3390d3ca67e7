package kube

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// The cluster's timing, shorter than Kubernetes' defaults so that a node's
// death shows within seconds rather than minutes (CONTRIBUTING.md, "The test
// cluster"): the kubelet renews its lease every 2 s, the node
// controller marks a node unreachable after 16 s of silence, and pods
// leave an unreachable or not-ready node after 10 s.
const (
	nodeLeaseSeconds        = 8
	nodeStatusEvery         = "4s"
	nodeMonitorGrace        = "16s"
	nodeMonitorPeriod       = "2s"
	defaultTolerationSecond = "10"
)

// volumePluginDir is where the kubelets and the controller manager look for
// FlexVolume drivers and make the directory if it is missing: each machine's
// own /var/lib, never the host's /usr/libexec/kubernetes (their default).
const volumePluginDir = "/var/lib/kubelet/volume-plugins"

// sandboxImage is the pause image every node imports (images.go).
const sandboxImage = "localhost/kube-pause:3.10.2"

// writeConfig writes the certificates, the kubeconfigs and every daemon's
// configuration.
func (c *Cluster) writeConfig() error {
	st := c.st
	p, err := newPKI(filepath.Join(st.Dir, "pki"))
	if err != nil {
		return err
	}
	cp := c.ControlPlane
	ips := []net.IP{cp.Addr4.AsSlice(), net.IPv4(127, 0, 0, 1), KubernetesService.AsSlice()}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", ControlPlane}
	if err := p.server("apiserver", dns, ips); err != nil {
		return err
	}
	if err := p.keyPair("service-account"); err != nil {
		return err
	}
	clients := []struct{ name, cn, org string }{
		{"admin", "kubernetes-admin", "system:masters"},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kube-proxy", "system:kube-proxy", ""},
	}
	for _, n := range c.Nodes {
		clients = append(clients, struct{ name, cn, org string }{n.Name, "system:node:" + n.Name, "system:nodes"})
	}
	for _, cl := range clients {
		var orgs []string
		if cl.org != "" {
			orgs = []string{cl.org}
		}
		if err := p.client(cl.name, cl.cn, orgs...); err != nil {
			return err
		}
	}
	st.LabKubeconfig = filepath.Join(st.Dir, "lab.kubeconfig")
	if err := writeKubeconfig(st.LabKubeconfig, st.LabServer, p, "admin"); err != nil {
		return err
	}
	local := fmt.Sprintf("https://127.0.0.1:%d", APIPort)
	for _, name := range []string{"controller-manager", "scheduler"} {
		if err := writeKubeconfig(cp.etc(name+".kubeconfig"), local, p, name); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := writeKubeconfig(n.etc("kubelet.kubeconfig"), st.LabServer, p, n.Name); err != nil {
			return err
		}
		if err := writeKubeconfig(n.etc("kube-proxy.kubeconfig"), st.LabServer, p, "kube-proxy"); err != nil {
			return err
		}
		if err := n.writeNodeConfig(p); err != nil {
			return err
		}
	}
	return st.write()
}

func writeKubeconfig(path, server string, p *pki, user string) error {
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: ipfailover-test
    cluster:
      server: %s
      certificate-authority: %s
users:
  - name: %s
    user:
      client-certificate: %s
      client-key: %s
contexts:
  - name: ipfailover-test
    context:
      cluster: ipfailover-test
      user: %s
current-context: ipfailover-test
`, server, p.path("ca.crt"), user, p.path(user+".crt"), p.path(user+".key"), user)
	return os.WriteFile(path, []byte(text), 0o600)
}

// writeNodeConfig writes a node's containerd, CNI, kubelet and kube-proxy
// configuration. Paths inside the node's /run, /var/lib and /var/log are
// the daemons' defaults: each node has its own.
func (m *Machine) writeNodeConfig(p *pki) error {
	cni := m.etc("cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml": fmt.Sprintf(`# containerd of %[1]s (Debian's), in the node's namespaces: its root,
# state and socket are the defaults, inside the node's /var/lib and /run.
version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[2]q

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd-opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[3]q
  # No CAP_SYS_RESOURCE on this machine: containers may not get a lower
  # oom_score_adj than containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[4]q
`, m.Name, containerdSocket, sandboxImage, cni),
		"cni/10-bridge.conflist": fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "ipfailover-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, m.PodCIDR),
		// No cluster DNS: glibc falls back to 127.0.0.1, which refuses at
		// once, and /etc/hosts names the node.
		"resolv.conf": "# no DNS server in the test cluster\n",
		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[2]s
authorization:
  mode: AlwaysAllow
# PID 1 is not systemd; cgroup v1 is what this machine has. Each node's
# pods live below its own cgroup.
cgroupDriver: cgroupfs
cgroupRoot: %[3]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[4]s
resolvConf: %[5]s
volumePluginDir: %[8]s
# No CAP_SYS_RESOURCE: the kubelet cannot lower its own OOM score.
oomScoreAdj: 0
# The disk and memory are shared with everything else on this machine:
# evict only when they are nearly gone, and never collect the imported
# images (nothing can pull them again).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeLeaseDurationSeconds: %[6]d
nodeStatusUpdateFrequency: %[7]s
nodeStatusReportFrequency: %[7]s
`, m.Addr4, p.path("ca.crt"), m.cgroup(), containerdSocket, m.etc("resolv.conf"), nodeLeaseSeconds, nodeStatusEvery, volumePluginDir),
		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %[4]s
# No CAP_SYS_RESOURCE; and conntrack's limits are the host's, not the
# node's: leave them alone.
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, m.etc("kube-proxy.kubeconfig"), m.Name, m.Addr4, PodCIDR),
	}
	for name, text := range files {
		if err := os.WriteFile(m.etc(name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// command is a daemon's command line.
func (m *Machine) command(d Daemon) ([]string, error) {
	st := m.c.st
	bin := func(name string) string { return filepath.Join(st.Bin, name) }
	pki := func(file string) string { return filepath.Join(st.Dir, "pki", file) }
	switch d {
	case Etcd:
		return []string{bin("etcd"), "--name", m.Name, "--data-dir", "/var/lib/etcd",
			"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
			"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
			"--initial-cluster", m.Name + "=http://127.0.0.1:2380", "--log-level", "warn", "--logger", "zap"}, nil
	case APIServer:
		return []string{bin("kube-apiserver"),
			"--advertise-address", m.Addr4.String(), "--secure-port", fmt.Sprint(APIPort),
			"--etcd-servers", "http://127.0.0.1:2379",
			"--service-cluster-ip-range", ServiceCIDR.String(),
			"--client-ca-file", pki("ca.crt"),
			"--tls-cert-file", pki("apiserver.crt"), "--tls-private-key-file", pki("apiserver.key"),
			"--kubelet-client-certificate", pki("apiserver-kubelet-client.crt"), "--kubelet-client-key", pki("apiserver-kubelet-client.key"),
			"--kubelet-preferred-address-types", "InternalIP,Hostname",
			"--service-account-issuer", "https://kubernetes.default.svc",
			"--service-account-key-file", pki("service-account.pub"), "--service-account-signing-key-file", pki("service-account.key"),
			"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
			"--allow-privileged=true",
			"--default-not-ready-toleration-seconds", defaultTolerationSecond,
			"--default-unreachable-toleration-seconds", defaultTolerationSecond,
			"--profiling=false"}, nil
	case ControllerManager:
		kc := m.etc("controller-manager.kubeconfig")
		return []string{bin("kube-controller-manager"),
			"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1", "--leader-elect=false",
			"--service-account-private-key-file", pki("service-account.key"), "--root-ca-file", pki("ca.crt"),
			"--cluster-signing-cert-file", pki("ca.crt"), "--cluster-signing-key-file", pki("ca.key"),
			"--use-service-account-credentials",
			"--node-monitor-grace-period", nodeMonitorGrace, "--node-monitor-period", nodeMonitorPeriod,
			// Its attach-detach controller makes its FlexVolume directory
			// when it starts (by default the host's /usr/libexec/kubernetes):
			// the machine's own /var/lib, like the kubelets'.
			"--flex-volume-plugin-dir", volumePluginDir,
			"--profiling=false"}, nil
	case Scheduler:
		kc := m.etc("scheduler.kubeconfig")
		return []string{bin("kube-scheduler"),
			"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1", "--leader-elect=false", "--profiling=false"}, nil
	case Containerd:
		return []string{"containerd", "--config", m.etc("containerd.toml")}, nil
	case Kubelet:
		return []string{bin("kubelet"), "--config", m.etc("kubelet.yaml"), "--kubeconfig", m.etc("kubelet.kubeconfig"),
			"--hostname-override", m.Name, "--node-ip", m.Addr4.String()}, nil
	case KubeProxy:
		return []string{bin("kube-proxy"), "--config", m.etc("kube-proxy.yaml")}, nil
	}
	return nil, fmt.Errorf("%s has no daemon %q (it runs %v)", m.Name, d, m.daemons)
}
