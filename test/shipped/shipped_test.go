package shipped

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipfailover/ipfailover/test/nstest"
)

// node13 is keepalived.conf as the shipped image's generator writes it for
// node .13 (slot 13, REPLICA_COUNT 2, so idx 2: VIP_2 is preferred, state
// MASTER and priority 255-13; VIP_1 gets 13 mod 64 plus a random part, 17
// here), the default config name, VRRP id offset 10, advert_int left at
// keepalived's default of 1, the check on port 8080.
const node13 = `global_defs {
   notification_email {
     root@localhost
   }
   notification_email_from ipfailover@openshift.local
   smtp_server 127.0.0.1
   smtp_connect_timeout 30
   router_id OpenShift_IPFailover
}

vrrp_script chk_OpenShift_IPFailover {
   script "/bin/bash -c '</dev/tcp/192.0.2.13/8080'"
   interval 2
}

vrrp_instance OpenShift_IPFailover_VIP_1 {
   interface eth0
   state BACKUP
   virtual_router_id 11
   priority 30
   preempt_delay 300
   authentication {
      auth_type PASS
      auth_pass OpenShift-IPFailover
   }
   track_script {
      chk_OpenShift_IPFailover
   }
   virtual_ipaddress {
      192.0.2.100 dev eth0
   }
}

vrrp_instance OpenShift_IPFailover_VIP_2 {
   interface eth0
   state MASTER
   virtual_router_id 12
   priority 242
   preempt_delay 300
   authentication {
      auth_type PASS
      auth_pass OpenShift-IPFailover
   }
   track_script {
      chk_OpenShift_IPFailover
   }
   virtual_ipaddress {
      192.0.2.101 dev eth0
   }
}
`

func TestConf(t *testing.T) {
	got := Conf(Options{
		VIPs:        []netip.Addr{netip.MustParseAddr("192.0.2.100"), netip.MustParseAddr("192.0.2.101")},
		Node:        netip.MustParseAddr("192.0.2.13"),
		MonitorPort: 8080,
		Random:      func(int) int { return 17 },
	})
	if diff := cmp.Diff(node13, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// TestPriorities: three nodes .11 .12 .13 with REPLICA_COUNT 3 and three
// VIPs, the bench's fleet: .11 prefers n mod 3 = 0, .12 every n (255-12
// and 12+1 in turn), .13 even n; each VIP's top priority is on another
// node.
func TestPriorities(t *testing.T) {
	vips := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("198.51.100.3")}
	want := map[string][]string{
		"192.0.2.11": {"BACKUP 11", "BACKUP 11", "MASTER 244"},
		"192.0.2.12": {"MASTER 243", "MASTER 13", "MASTER 243"},
		"192.0.2.13": {"BACKUP 13", "MASTER 242", "BACKUP 13"},
	}
	for node, w := range want {
		conf := Conf(Options{VIPs: vips, Node: netip.MustParseAddr(node), MonitorPort: 8080, ReplicaCount: 3})
		var got []string
		var state string
		for _, line := range strings.Split(conf, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "state":
				state = f[1]
			case len(f) == 2 && f[0] == "priority":
				got = append(got, state+" "+f[1])
			}
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s (-want +got)\n%s", node, diff)
		}
	}
}

// TestKeepalivedAccepts runs the real keepalived's config test on a
// generated file, in a namespace with the node's eth0 and address.
func TestKeepalivedAccepts(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("keepalived is not installed")
	}
	ns := nstest.New(t, "ipf-shipped")
	nstest.Veth(t, ns, "eth0", "p0")
	nstest.IP(t, ns, "addr", "add", "192.0.2.13/24", "dev", "eth0")
	f := filepath.Join(t.TempDir(), "keepalived.conf")
	if err := os.WriteFile(f, []byte(node13), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "keepalived", "-t", "-l", "-f", f).CombinedOutput()
	// keepalived exits 6 for the script security notice the shipped image
	// gets (scripts as root without enable_script_security).
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 6 {
			t.Errorf("keepalived -t: %v\n%s", err, out)
		}
	}
}
