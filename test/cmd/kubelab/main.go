// Command kubelab runs the test Kubernetes cluster of test/kube: make
// kube-up, make kube-down and make kube-test use it.
//
//	kubelab up [-dir DIR] [-bin DIR] [-image REF]... [-service-port N]
//	                                                   build a cluster and leave it running
//	kubelab down [-dir DIR]                            remove it (safe to run twice)
//	kubelab status [-dir DIR]                          print where everything is
//	kubelab forward DIR                                (the cluster's API forwarder; up starts it)
//	kubelab serve -listen ADDR -name NAME              (a node's service; up -service-port starts them)
//
// DIR defaults to out/kube in the repository (IPFAILOVER_KUBE overrides).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/kube"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], os.Stdout, log); err != nil {
		fmt.Fprintln(os.Stderr, "kubelab:", err)
		os.Exit(1)
	}
}

type images []string

func (i *images) String() string     { return strings.Join(*i, ",") }
func (i *images) Set(v string) error { *i = append(*i, v); return nil }

func run(args []string, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return errors.New("usage: kubelab up|down|status|forward")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("kubelab "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "the cluster's directory (default out/kube in the repository)")
	bin := fs.String("bin", "bin/kube", "the Kubernetes binaries, etcd and pause (make kube-bins)")
	var imgs images
	fs.Var(&imgs, "image", "a podman image to import into every node (repeatable)")
	servicePort := fs.Int("service-port", 0, "up: serve a service on this port on every node, answering with the node's name (0: none)")
	listen := fs.String("listen", "", "serve: the address to listen on")
	name := fs.String("name", "", "serve: the name to answer with")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "serve" {
		return serve(ctx, *listen, *name)
	}
	if *dir == "" && args[0] != "forward" {
		d, err := kube.DefaultDir()
		if err != nil {
			return err
		}
		*dir = d
	}
	switch args[0] {
	case "up":
		self, err := os.Executable()
		if err != nil {
			return err
		}
		began := time.Now()
		c, err := kube.Up(ctx, kube.Options{Dir: *dir, Bin: *bin, Images: imgs, Forwarder: []string{self, "forward"},
			Service: []string{self, "serve"}, ServicePort: *servicePort, Logger: log})
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(stdout, "cluster up in %s\n", time.Since(began).Round(100*time.Millisecond))
		return status(stdout, c.State())
	case "down":
		return kube.Down(ctx, *dir, log)
	case "status":
		c, err := kube.Attach(*dir, log)
		if err != nil {
			return err
		}
		defer c.Close()
		return status(stdout, c.State())
	case "forward":
		if fs.NArg() != 1 {
			return errors.New("usage: kubelab forward DIR")
		}
		return kube.Forward(ctx, fs.Arg(0))
	}
	return fmt.Errorf("unknown command %q: want up, down, status, forward or serve", args[0])
}

// status prints what a user needs to reach the cluster.
func status(w io.Writer, st kube.State) error {
	fmt.Fprintf(w, "KUBECONFIG=%s  (API server %s; in the lab %s)\n", st.Kubeconfig, st.Server, st.LabServer)
	fmt.Fprintf(w, "kubectl:    %s/kubectl\n", st.Bin)
	fmt.Fprintf(w, "state:      %s/%s\n", st.Dir, kube.StateName)
	fmt.Fprintf(w, "%-14s %-22s %-15s %s\n", "MACHINE", "NETNS", "ADDRESS", "PODS")
	fmt.Fprintf(w, "%-14s %-22s %-15s\n", st.ControlPlane.Name, st.ControlPlane.Netns, st.ControlPlane.Addr4)
	for _, n := range st.Nodes {
		fmt.Fprintf(w, "%-14s %-22s %-15s %s\n", n.Name, n.Netns, n.Addr4, n.PodCIDR)
	}
	fmt.Fprintf(w, "%-14s %-22s %-15s\n", st.Client.Name, st.Client.Netns, st.Client.Addr4)
	if st.ServicePort == 0 {
		return nil
	}
	var img string
	for _, ref := range st.Images {
		if strings.Contains(ref, "ipfailover") {
			img = ref
			break
		}
	}
	name, tag, _ := strings.Cut(img, ":")
	fmt.Fprintf(w, `
For the README's quick start on this cluster:
  export KUBECONFIG=%s PATH=%s:$PATH
  <your-registry>/ipfailover:<tag> is %s:%s (imported on every node: skip step 1)
  every node serves port %d (OPENSHIFT_HA_MONITOR_PORT=%d), answering with its name
  VIPs: free addresses of %s's subnet, such as 192.0.2.100-102
  the client: ip netns exec %s curl http://192.0.2.100:%d/
`, st.Kubeconfig, st.Bin, name, tag, st.ServicePort, st.ServicePort, st.Nodes[0].Addr4, st.Client.Netns, st.ServicePort)
	return nil
}

// serve answers every request with name, on addr, until ctx ends: a
// node's service for the quick start.
func serve(ctx context.Context, addr, name string) error {
	if addr == "" || name == "" {
		return errors.New("usage: kubelab serve -listen ADDR -name NAME")
	}
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, name)
	})}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
