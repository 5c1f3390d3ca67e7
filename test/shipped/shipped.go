// Package shipped writes keepalived.conf the way the shipped
// keepalived-ipfailover image's generator does, for the tests and the
// benchmarks that run a node, or a whole fleet, on it: a mixed fleet in a
// rolling update, and the same faults measured against ipfailover.
//
// What it reproduces (from the image's bash generator, see SPEC.md): the
// global_defs without any of ipfailover's additions, one vrrp_script that
// connects to the node's own address with bash's /dev/tcp every 2 s, one
// vrrp_instance per VIP named <name>_VIP_<n> with router id offset+n, the
// password, preempt_delay 300, and the image's priorities: slot = the last
// octet of the node's IPv4 address mod 128, idx = slot mod REPLICA_COUNT +
// 1; instance n is preferred when n mod idx = 0 (state MASTER, priority
// 255 - slot and slot + 1 in turn), the others get slot mod 64 plus the
// image's $RANDOM % 32, which the caller chooses.
package shipped

import (
	"fmt"
	"net/netip"
	"strings"
)

// Options describe one node of a shipped-image fleet.
type Options struct {
	// VIPs are OPENSHIFT_HA_VIRTUAL_IPS, IPv4, one instance each.
	VIPs []netip.Addr
	// Node is the node's IPv4 address: its priorities and the check's
	// target.
	Node netip.Addr
	// MonitorPort is OPENSHIFT_HA_MONITOR_PORT.
	MonitorPort int
	// ReplicaCount is OPENSHIFT_HA_REPLICA_COUNT (0: the default 2).
	ReplicaCount int
	// Random is the image's $RANDOM % 32 for instance n (from 1) that is
	// not preferred here; nil gives 0.
	Random func(n int) int
}

// The shipped defaults the generator writes.
const (
	name      = "OpenShift-IPFailover"
	scrubbed  = "OpenShift_IPFailover"
	offset    = 10
	iface     = "eth0"
	preempt   = "preempt_delay 300"
	checkSecs = 2
)

// Conf is the node's keepalived.conf.
func Conf(o Options) string {
	replicas := o.ReplicaCount
	if replicas == 0 {
		replicas = 2
	}
	slot := int(o.Node.As4()[3]) % 128
	idx := slot%replicas + 1
	var b strings.Builder
	fmt.Fprintf(&b, `global_defs {
   notification_email {
     root@localhost
   }
   notification_email_from ipfailover@openshift.local
   smtp_server 127.0.0.1
   smtp_connect_timeout 30
   router_id %s
}

vrrp_script chk_%s {
   script "/bin/bash -c '</dev/tcp/%s/%d'"
   interval %d
}
`, scrubbed, scrubbed, o.Node, o.MonitorPort, checkSecs)
	high := true
	for i, v := range o.VIPs {
		n := i + 1
		state, prio := "BACKUP", slot%64
		if n%idx == 0 {
			state = "MASTER"
			if high {
				prio = 255 - slot
			} else {
				prio = slot + 1
			}
			high = !high
		} else if o.Random != nil {
			prio += o.Random(n)
		}
		fmt.Fprintf(&b, `
vrrp_instance %[1]s_VIP_%[2]d {
   interface %[3]s
   state %[4]s
   virtual_router_id %[5]d
   priority %[6]d
   %[7]s
   authentication {
      auth_type PASS
      auth_pass %[8]s
   }
   track_script {
      chk_%[1]s
   }
   virtual_ipaddress {
      %[9]s dev %[3]s
   }
}
`, scrubbed, n, iface, state, offset+n, prio, preempt, name, v)
	}
	return b.String()
}
