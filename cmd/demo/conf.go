package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ipfailover/ipfailover/test/lab"
)

// confPath is where ipfailover writes keepalived.conf in a node (its
// KEEPALIVED_CONFIG default), on the node's private /etc/keepalived.
const confPath = "/etc/keepalived/keepalived.conf"

// keepalivedConf is what the demo reads from a node's keepalived.conf.
type keepalivedConf struct {
	text      string
	instances map[string]instanceConf
}

// instanceConf is one vrrp_instance: its priority, and whether it starts
// as MASTER (the node prefers it).
type instanceConf struct {
	priority int
	master   bool
}

// readConf reads the keepalived.conf that p's ipfailover wrote.
func readConf(p *lab.Process) (keepalivedConf, error) {
	b, err := p.ReadFile(confPath)
	if err != nil {
		return keepalivedConf{}, fmt.Errorf("reading %s's keepalived.conf: %w", p.Node().Name, err)
	}
	c, err := parseConf(string(b))
	if err != nil {
		return c, fmt.Errorf("%s's keepalived.conf: %w", p.Node().Name, err)
	}
	return c, nil
}

// parseConf reads the priority and start state of every vrrp_instance.
func parseConf(text string) (keepalivedConf, error) {
	c := keepalivedConf{text: text, instances: map[string]instanceConf{}}
	var name string
	for line := range strings.SplitSeq(c.text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "vrrp_instance" && f[2] == "{":
			name = f[1]
			c.instances[name] = instanceConf{}
		case name == "" || len(f) != 2:
		case f[0] == "priority":
			pr, err := strconv.Atoi(f[1])
			if err != nil {
				return c, fmt.Errorf("%s: priority %q", name, f[1])
			}
			in := c.instances[name]
			in.priority = pr
			c.instances[name] = in
		case f[0] == "state" && f[1] == "MASTER":
			in := c.instances[name]
			in.master = true
			c.instances[name] = in
		}
	}
	if len(c.instances) == 0 {
		return c, errors.New("no vrrp_instance")
	}
	return c, nil
}
