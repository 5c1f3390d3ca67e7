package bench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
)

// ShippedConf is the keepalived.conf the shipped image's generator writes
// for the node at addr (IPv4), with its defaults: config name
// OpenShift-IPFailover, one instance per VIP, router ids 10+n, advert_int
// keepalived's 1 s, preempt_delay 300, and its check (bash's /dev/tcp to the
// node's address on its port, every 2 s) given as check, the script's
// command line.
//
// Priorities follow the shipped rule: slot = last octet mod 128, idx = slot
// mod replicas + 1; instance n is preferred when n mod idx = 0, with state
// MASTER and priority 255 - slot, or slot + 1 when the previous preferred
// instance took 255 - slot; the others get slot mod 64 plus a random 0..31.
func ShippedConf(addr netip.Addr, vips []netip.Addr, replicas int, check string) string {
	slot := int(addr.As4()[3]) % 128
	idx := slot%replicas + 1
	var b strings.Builder
	fmt.Fprintf(&b, `global_defs {
   notification_email {
     root@localhost
   }
   notification_email_from ipfailover@openshift.local
   smtp_server 127.0.0.1
   smtp_connect_timeout 30
   router_id OpenShift_IPFailover
}

vrrp_script chk_OpenShift_IPFailover {
   script "%s"
   interval 2
}
`, check)
	high := true
	for i, v := range vips {
		n := i + 1
		state, prio := "BACKUP", slot%64+rand.N(32)
		if n%idx == 0 {
			state = "MASTER"
			if high {
				prio = 255 - slot
			} else {
				prio = slot + 1
			}
			high = !high
		}
		fmt.Fprintf(&b, `
vrrp_instance OpenShift_IPFailover_VIP_%d {
   interface eth0
   state %s
   virtual_router_id %d
   priority %d
   preempt_delay 300
   authentication {
      auth_type PASS
      auth_pass OpenShift-IPFailover
   }
   track_script {
      chk_OpenShift_IPFailover
   }
   virtual_ipaddress {
      %s dev eth0
   }
}
`, n, state, 10+n, prio, v)
	}
	return b.String()
}
