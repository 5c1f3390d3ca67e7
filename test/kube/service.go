package kube

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func (c *Cluster) serviceCgroup() string { return c.st.Cgroup + "/services" }

// startServices runs argv -listen :port -name NODE in every node's network
// namespace, detached, in a cgroup of the cluster's (Down stops them): the
// service a user's VIPs lead to and the pods check
// (OPENSHIFT_HA_MONITOR_PORT), answering with its node's name. It returns
// once each one answers.
func (c *Cluster) startServices(ctx context.Context, argv []string, port int) error {
	if err := makeCgroup(c.serviceCgroup()); err != nil {
		return err
	}
	dir := filepath.Join(c.st.Dir, "services")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		cmd := append(append([]string{"nsenter", "--net=/run/netns/" + n.lab.Netns, "--"}, argv...),
			"-listen", fmt.Sprintf(":%d", port), "-name", n.Name)
		p := daemonProcess{c.serviceCgroup(), filepath.Join(dir, n.Name+".pid"), filepath.Join(dir, n.Name+".log"), cmd}
		if err := c.detach(ctx, p); err != nil {
			return fmt.Errorf("starting the service on %s: %w", n.Name, err)
		}
		addr := net.JoinHostPort(n.lab.Addr4.String(), strconv.Itoa(port))
		err := poll(ctx, 30*time.Second, n.Name+"'s service on "+addr, func() (bool, error) {
			conn, err := n.lab.Dial(ctx, "tcp", addr)
			if err != nil {
				return false, nil
			}
			conn.Close()
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	c.st.ServicePort = port
	return nil
}
