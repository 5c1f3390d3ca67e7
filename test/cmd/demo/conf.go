package main

import (
	"fmt"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/lab"
)

// confPath is where ipfailover writes keepalived.conf in a node (its
// KEEPALIVED_CONFIG default), on the node's private /etc/keepalived.
const confPath = "/etc/keepalived/keepalived.conf"

// nodeConf is a node's keepalived.conf, as text and as read by
// keepalived.Parse.
type nodeConf struct {
	text string
	*keepalived.Conf
}

// priority is the node's priority for instance name; ok is false when the
// node does not run it.
func (c nodeConf) priority(name string) (prio int, ok bool) {
	if in := c.Instance(name); in != nil {
		return in.Priority, true
	}
	return 0, false
}

// master says whether the node starts instance name as MASTER (it prefers it).
func (c nodeConf) master(name string) bool {
	in := c.Instance(name)
	return in != nil && in.Master
}

// readConf reads the keepalived.conf that p's ipfailover wrote.
func readConf(p *lab.Process) (nodeConf, error) {
	b, err := p.ReadFile(confPath)
	if err != nil {
		return nodeConf{}, fmt.Errorf("reading %s's keepalived.conf: %w", p.Node().Name, err)
	}
	c, err := keepalived.Parse(b)
	if err != nil {
		return nodeConf{}, fmt.Errorf("%s's keepalived.conf: %w", p.Node().Name, err)
	}
	return nodeConf{text: string(b), Conf: c}, nil
}
