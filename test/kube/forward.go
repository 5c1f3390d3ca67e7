package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// The API server listens in the lab's network, which the host's own
// network namespace does not reach (and must not be changed to). The
// forwarder, a process of the cluster (Options.Forwarder runs Forward),
// listens on a free port of the host's loopback and passes every
// connection on to the API server from the lab's client namespace: the
// host's kubeconfig (State.Kubeconfig) points at it, for kubectl and
// client-go in the host.

func (c *Cluster) forwarderDir() string { return filepath.Join(c.st.Dir, "forwarder") }

func (c *Cluster) forwarderCgroup() string { return c.st.Cgroup + "/forwarder" }

// startForwarder starts argv DIR, waits for the port it listens on, and
// writes the host's kubeconfig.
func (c *Cluster) startForwarder(ctx context.Context, argv []string) error {
	dir := c.forwarderDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	portFile := filepath.Join(dir, "port")
	// A port file left by an earlier forwarder names a port nobody serves.
	if err := os.Remove(portFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cmd := append(append([]string{}, argv...), c.st.Dir)
	if err := c.detach(ctx, daemonProcess{c.forwarderCgroup(), filepath.Join(dir, "pid"), filepath.Join(dir, "log"), cmd}); err != nil {
		return fmt.Errorf("starting the API forwarder: %w", err)
	}
	var port int
	err := poll(ctx, 30*time.Second, "the API forwarder's port", func() (bool, error) {
		data, err := os.ReadFile(portFile)
		if err != nil {
			if _, ok := c.running(c.forwarderCgroup(), filepath.Join(dir, "pid")); !ok {
				return false, fmt.Errorf("the API forwarder exited:\n%s", tail(filepath.Join(dir, "log"), 15))
			}
			return false, nil
		}
		port, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil, err
	})
	if err != nil {
		return err
	}
	c.st.Server = fmt.Sprintf("https://127.0.0.1:%d", port)
	c.st.Kubeconfig = filepath.Join(c.st.Dir, "kubeconfig")
	p := &pki{dir: filepath.Join(c.st.Dir, "pki")}
	return writeKubeconfig(c.st.Kubeconfig, c.st.Server, p, "admin")
}

// Forward serves the API server of the cluster in dir on a free port of
// 127.0.0.1 (written to DIR/forwarder/port) until ctx ends: each
// connection is copied both ways to the API server, dialled from the lab's
// client namespace.
func Forward(ctx context.Context, dir string) error {
	st, err := readState(filepath.Join(dir, StateName))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// Written whole: startForwarder polls for this file and reads it as
	// soon as it exists.
	if err := writeFileAtomic(filepath.Join(dir, "forwarder", "port"), []byte(strconv.Itoa(port)+"\n")); err != nil {
		return err
	}
	target := netip.AddrPortFrom(st.ControlPlane.Addr4, APIPort).String()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		in, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() { forward(ctx, in, st.Client.Netns, target) })
	}
}

func forward(ctx context.Context, in net.Conn, netns, target string) {
	defer in.Close()
	var out net.Conn
	err := lab.InNetns(netns, func() error {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var d net.Dialer
		var err error
		out, err = d.DialContext(dctx, "tcp", target)
		return err
	})
	if err != nil {
		if out != nil {
			out.Close()
		}
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		// An error (a reset on either side) ends the copy like EOF.
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
