package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestParseVIPs(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want []netip.Addr
	}{
		{name: "one", in: "192.0.2.1", want: addrs("192.0.2.1")},
		{name: "last octet range", in: "10.1.1.100-102", want: addrs("10.1.1.100", "10.1.1.101", "10.1.1.102")},
		{name: "range of one", in: "10.1.1.100-100", want: addrs("10.1.1.100")},
		{name: "documented list", in: "1.2.3.4-6,1.2.3.9", want: addrs("1.2.3.4", "1.2.3.5", "1.2.3.6", "1.2.3.9")},
		{name: "commas and spaces", in: "1.1.1.1, 2.2.2.2,3.3.3.3-4  4.4.4.4", want: addrs("1.1.1.1", "2.2.2.2", "3.3.3.3", "3.3.3.4", "4.4.4.4")},
		{name: "full range", in: "192.0.2.10-192.0.2.12", want: addrs("192.0.2.10", "192.0.2.11", "192.0.2.12")},
		{name: "ipv6 last group upper", in: "2001:DB8:1ABC::1F39-1F3B", want: addrs("2001:db8:1abc::1f39", "2001:db8:1abc::1f3a", "2001:db8:1abc::1f3b")},
		{name: "ipv6 last group lower", in: "2001:db8::1f39-1f3b", want: addrs("2001:db8::1f39", "2001:db8::1f3a", "2001:db8::1f3b")},
		{name: "ipv6 full range", in: "2001:db8::a-2001:db8::c", want: addrs("2001:db8::a", "2001:db8::b", "2001:db8::c")},
		{name: "mixed", in: "192.0.2.1,2001:db8::1", want: addrs("192.0.2.1", "2001:db8::1")},
		{name: "range to 255", in: "192.0.2.254-255", want: addrs("192.0.2.254", "192.0.2.255")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVIPs(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseVIPsRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, in, msg string
	}{
		{name: "empty", in: " , ", msg: "no address"},
		{name: "garbage", in: "vip", msg: `"vip" is not an IP address`},
		{name: "descending", in: "10.1.1.102-100", msg: "descends"},
		{name: "octet overflow", in: "10.1.1.100-300", msg: "not an octet"},
		{name: "crosses octet", in: "10.1.1.250-10.1.2.5", msg: "crosses the last octet"},
		{name: "crosses group", in: "2001:db8::1:ffff-2001:db8::2:1", msg: "crosses the last group"},
		{name: "group overflow", in: "2001:db8::1-10000", msg: "not a hex group"},
		{name: "family mix in range", in: "192.0.2.1-2001:db8::1", msg: "range end"},
		{name: "duplicate", in: "192.0.2.1,192.0.2.0-1", msg: "listed twice"},
		{name: "cidr", in: "192.0.2.1/24", msg: "without a prefix length"},
		{name: "multicast", in: "224.0.0.18", msg: "not a unicast address"},
		{name: "loopback", in: "127.0.0.1", msg: "not a unicast address"},
		{name: "unspecified", in: "::", msg: "not a unicast address"},
		{name: "zone", in: "fe80::1%eth0", msg: "no zone"},
		{name: "two dashes", in: "192.0.2.1-2-3", msg: "more than one dash"},
		{name: "no end", in: "192.0.2.1-", msg: "no end"},
		{name: "short", in: "192.0.2", msg: "not an IP address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVIPs(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("ParseVIPs(%q) = %v, want an error with %q", tt.in, err, tt.msg)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(Raw{VirtualIPs: "192.0.2.1", MetricsAddress: ":9650"})
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Name: "OpenShift-IPFailover", Scrubbed: "OpenShift_IPFailover",
		VIPs:   addrs("192.0.2.1"),
		Groups: []Group{{Index: 1, RouterID: 11, VIPs: addrs("192.0.2.1")}},
		Check:  CheckPort, MonitorPort: 80, CheckInterval: 150 * time.Millisecond, Offset: 10, ReplicaCount: 2,
		Preemption:  Preemption{Delay: 300 * time.Second},
		AdminEmails: []string{"root@localhost"}, SMTPServer: "127.0.0.1",
		AdvertInterval:    time.Second,
		GARPRefreshRepeat: 1,
		KeepalivedConfig:  "/etc/keepalived/keepalived.conf", MetricsAddress: ":9650",
	}
	if diff := cmp.Diff(want, c, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := c.CheckScriptName(); got != "chk_OpenShift_IPFailover" {
		t.Errorf("CheckScriptName = %q", got)
	}
}

func TestParseEveryVariable(t *testing.T) {
	c, err := Parse(Raw{
		ConfigName: "web-vips.prod", VirtualIPs: "192.0.2.1-4", VIPGroups: "2",
		Interface: "ens3", MonitorPort: "8080", Offset: "50", Excluded: "52,53",
		ReplicaCount: "3", UnicastPeers: "192.0.2.11,192.0.2.12", IPTablesChain: "INPUT",
		NFTablesRule: "yes", CheckScript: "/etc/keepalive/check.sh --fast", NotifyScript: "/etc/keepalive/notify.sh",
		CheckInterval: "5", Preemption: "nopreempt", AdminEmails: "a@example.com b@example.org",
		SMTPServer: "smtp.example.com", Selector: "anything=goes", AdvertInterval: "0.25",
		GARPRefresh: "60", GARPRefreshRep: "2",
		UnicastSource: "192.0.2.11", KeepalivedConf: "/run/keepalived.conf", KeepalivedOpts: "-D",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"scrubbed", c.Scrubbed, "web_vipsprod"},
		{"check script name", c.CheckScriptName(), "chk_web_vips.prod"},
		{"groups", len(c.Groups), 2},
		{"router ids", []RouterID{c.Groups[0].RouterID, c.Groups[1].RouterID}, []RouterID{51, 54}},
		{"interface", c.Interface, "ens3"},
		{"check", c.Check, CheckScript},
		{"port", c.MonitorPort, uint16(8080)},
		{"replicas", c.ReplicaCount, 3},
		{"unicast", c.Unicast, true},
		{"chain", c.IPTablesChain, "INPUT"},
		{"nft", c.NFTables, true},
		{"interval", c.CheckInterval, 5 * time.Second},
		{"preemption", c.Preemption.String(), "nopreempt"},
		{"emails", c.AdminEmails, []string{"a@example.com", "b@example.org"}},
		{"smtp", c.SMTPServer, "smtp.example.com"},
		{"advert", c.AdvertInterval, 250 * time.Millisecond},
		{"garp refresh", c.GARPRefresh, time.Minute},
		{"garp refresh repeat", c.GARPRefreshRepeat, 2},
		{"unicast source", c.UnicastSource.String(), "192.0.2.11"},
		{"keepalived config", c.KeepalivedConfig, "/run/keepalived.conf"},
		{"keepalived flags", c.KeepalivedFlags, []string{"-D"}},
	} {
		if diff := cmp.Diff(check.want, check.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", check.what, diff)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	ok := Raw{VirtualIPs: "192.0.2.1"}
	for _, tt := range []struct {
		name   string
		mutate func(r *Raw)
		msg    string
	}{
		{"no vips", func(r *Raw) { r.VirtualIPs = "" }, "OPENSHIFT_HA_VIRTUAL_IPS is required"},
		{"bad vip", func(r *Raw) { r.VirtualIPs = "192.0.2.300" }, `OPENSHIFT_HA_VIRTUAL_IPS="192.0.2.300"`},
		{"name with newline", func(r *Raw) { r.ConfigName = "a\n}" }, `OPENSHIFT_HA_CONFIG_NAME="a\n}"`},
		{"name with brace", func(r *Raw) { r.ConfigName = "a{b" }, "OPENSHIFT_HA_CONFIG_NAME"},
		{"name with space", func(r *Raw) { r.ConfigName = "my failover" }, "OPENSHIFT_HA_CONFIG_NAME"},
		{"name only dots", func(r *Raw) { r.ConfigName = "..." }, "needs at least one letter"},
		{"groups negative", func(r *Raw) { r.VIPGroups = "-1" }, `OPENSHIFT_HA_VIP_GROUPS="-1": must be a whole number 0..255`},
		{"groups text", func(r *Raw) { r.VIPGroups = "three" }, "OPENSHIFT_HA_VIP_GROUPS"},
		{"interface injection", func(r *Raw) { r.Interface = "eth0}" }, "OPENSHIFT_HA_NETWORK_INTERFACE"},
		{"interface too long", func(r *Raw) { r.Interface = "abcdefghijklmnop" }, "OPENSHIFT_HA_NETWORK_INTERFACE"},
		{"port too big", func(r *Raw) { r.MonitorPort = "70000" }, `OPENSHIFT_HA_MONITOR_PORT="70000": must be a whole number 0..65535`},
		{"port text", func(r *Raw) { r.MonitorPort = "80a" }, "OPENSHIFT_HA_MONITOR_PORT"},
		{"offset too big", func(r *Raw) { r.Offset = "300" }, `OPENSHIFT_HA_VRRP_ID_OFFSET="300": must be a whole number 0..254`},
		{"offset negative", func(r *Raw) { r.Offset = "-1" }, "OPENSHIFT_HA_VRRP_ID_OFFSET"},
		{"excluded zero", func(r *Raw) { r.Excluded = "0" }, "HA_EXCLUDED_VRRP_IDS"},
		{"excluded text", func(r *Raw) { r.ExcludedLong = "12 x" }, "OPENSHIFT_HA_EXCLUDED_VRRP_IDS"},
		{"excluded disagree", func(r *Raw) { r.Excluded, r.ExcludedLong = "1", "2" }, "set one of them"},
		{"replicas zero", func(r *Raw) { r.ReplicaCount = "0" }, "OPENSHIFT_HA_REPLICA_COUNT"},
		{"unicast bool", func(r *Raw) { r.UseUnicast = "maybe" }, "OPENSHIFT_HA_USE_UNICAST"},
		{"unicast without peers", func(r *Raw) { r.UseUnicast = "true" }, "needs OPENSHIFT_HA_UNICAST_PEERS"},
		{"peer garbage", func(r *Raw) { r.UnicastPeers = "192.0.2.11,nope" }, "OPENSHIFT_HA_UNICAST_PEERS"},
		{"peer injection", func(r *Raw) { r.UnicastPeers = "192.0.2.11\n}" }, "OPENSHIFT_HA_UNICAST_PEERS"},
		{"peers of other family", func(r *Raw) { r.UnicastPeers = "2001:db8::1" }, "has no IPv4 address"},
		{"chain injection", func(r *Raw) { r.IPTablesChain = "INPUT -j DROP" }, "OPENSHIFT_HA_IPTABLES_CHAIN"},
		{"chain read as an option", func(r *Raw) { r.IPTablesChain = "-F" }, `OPENSHIFT_HA_IPTABLES_CHAIN="-F": not an iptables chain name`},
		{"chain too long", func(r *Raw) { r.IPTablesChain = strings.Repeat("C", 29) }, "longer than 28 characters"},
		{"check script relative", func(r *Raw) { r.CheckScript = "check.sh" }, "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"check script quote", func(r *Raw) { r.CheckScript = `/x.sh"` }, "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"check script newline", func(r *Raw) { r.CheckScript = "/x.sh\n}" }, "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"check script comment", func(r *Raw) { r.CheckScript = "/x.sh #" }, "OPENSHIFT_HA_CHECK_SCRIPT"},
		{"notify script bang", func(r *Raw) { r.NotifyScript = "/x.sh!" }, "OPENSHIFT_HA_NOTIFY_SCRIPT"},
		{"notify script dollar", func(r *Raw) { r.NotifyScript = "/x.sh $HOME" }, "OPENSHIFT_HA_NOTIFY_SCRIPT"},
		{"interval zero", func(r *Raw) { r.CheckInterval = "0" }, "OPENSHIFT_HA_CHECK_INTERVAL"},
		{"interval below the retry", func(r *Raw) { r.CheckInterval = "0.01" }, `OPENSHIFT_HA_CHECK_INTERVAL="0.01": must be seconds 0.02..3600`},
		{"interval thousandths", func(r *Raw) { r.CheckInterval = "0.125" }, "OPENSHIFT_HA_CHECK_INTERVAL"},
		{"interval too long", func(r *Raw) { r.CheckInterval = "3601" }, "OPENSHIFT_HA_CHECK_INTERVAL"},
		{"interval unit", func(r *Raw) { r.CheckInterval = "100ms" }, "OPENSHIFT_HA_CHECK_INTERVAL"},
		{"interval fraction for a script", func(r *Raw) { r.CheckInterval, r.CheckScript = "0.5", "/bin/true" }, `OPENSHIFT_HA_CHECK_INTERVAL="0.5": must be whole seconds 1..3600: keepalived runs OPENSHIFT_HA_CHECK_SCRIPT`},
		{"interval fraction without a check", func(r *Raw) { r.CheckInterval, r.MonitorPort = "1.5", "0" }, `OPENSHIFT_HA_CHECK_INTERVAL="1.5": must be whole seconds 1..3600`},
		{"preemption typo", func(r *Raw) { r.Preemption = "preempt_delay" }, `OPENSHIFT_HA_PREEMPTION="preempt_delay"`},
		{"preemption other", func(r *Raw) { r.Preemption = "preempt" }, "OPENSHIFT_HA_PREEMPTION"},
		{"preemption big", func(r *Raw) { r.Preemption = "preempt_delay 5000" }, "OPENSHIFT_HA_PREEMPTION"},
		{"email injection", func(r *Raw) { r.AdminEmails = "a@b}" }, "OPENSHIFT_HA_ADMIN_EMAILS"},
		{"email not one", func(r *Raw) { r.AdminEmails = "root" }, "OPENSHIFT_HA_ADMIN_EMAILS"},
		{"smtp injection", func(r *Raw) { r.SMTPServer = "1.2.3.4 }" }, "OPENSHIFT_HA_SMTP_SERVER"},
		{"advert zero", func(r *Raw) { r.AdvertInterval = "0" }, "OPENSHIFT_HA_ADVERT_INTERVAL"},
		{"advert thousandths", func(r *Raw) { r.AdvertInterval = "0.005" }, "OPENSHIFT_HA_ADVERT_INTERVAL"},
		{"advert too big", func(r *Raw) { r.AdvertInterval = "256" }, "OPENSHIFT_HA_ADVERT_INTERVAL"},
		{"garp refresh fraction", func(r *Raw) { r.GARPRefresh = "1.5" }, `OPENSHIFT_HA_GARP_MASTER_REFRESH="1.5": must be a whole number 0..86400`},
		{"garp refresh negative", func(r *Raw) { r.GARPRefresh = "-60" }, "OPENSHIFT_HA_GARP_MASTER_REFRESH"},
		{"garp refresh unit", func(r *Raw) { r.GARPRefresh = "60s" }, "OPENSHIFT_HA_GARP_MASTER_REFRESH"},
		{"garp refresh too long", func(r *Raw) { r.GARPRefresh = "86401" }, "OPENSHIFT_HA_GARP_MASTER_REFRESH"},
		{"garp repeat zero", func(r *Raw) { r.GARPRefresh, r.GARPRefreshRep = "60", "0" }, `OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT="0": must be a whole number 1..100`},
		{"garp repeat too many", func(r *Raw) { r.GARPRefresh, r.GARPRefreshRep = "60", "101" }, "OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT"},
		{"garp repeat without a refresh", func(r *Raw) { r.GARPRefreshRep = "2" }, `OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT="2": needs OPENSHIFT_HA_GARP_MASTER_REFRESH`},
		{"garp repeat with the refresh off", func(r *Raw) { r.GARPRefresh, r.GARPRefreshRep = "0", "2" }, "needs OPENSHIFT_HA_GARP_MASTER_REFRESH"},
		{"mcast source garbage", func(r *Raw) { r.MulticastSource = "x" }, "MULTICAST_SOURCE_IPADDRESS"},
		{"unicast source family", func(r *Raw) { r.UnicastSource = "2001:db8::1" }, "UNICAST_SOURCE_IPADDRESS"},
		{"keepalived config relative", func(r *Raw) { r.KeepalivedConf = "k.conf" }, "KEEPALIVED_CONFIG"},
		{"keepalived options newline", func(r *Raw) { r.KeepalivedOpts = "-D\n-x" }, "KEEPALIVED_OPTIONS"},
		{"metrics address", func(r *Raw) { r.MetricsAddress = "9650" }, "OPENSHIFT_HA_METRICS_ADDRESS"},
		{"peers from what", func(r *Raw) { r.PeersFrom = "nodes" }, `OPENSHIFT_HA_UNICAST_PEERS_FROM="nodes": must be "pods"`},
		{"peers from pods and a list", func(r *Raw) { r.PeersFrom, r.UnicastPeers = "pods", "192.0.2.11" }, `OPENSHIFT_HA_UNICAST_PEERS="192.0.2.11": cannot be set with OPENSHIFT_HA_UNICAST_PEERS_FROM=pods`},
		{"peers from pods without unicast", func(r *Raw) { r.PeersFrom, r.UseUnicast = "pods", "false" }, `OPENSHIFT_HA_USE_UNICAST="false": must be true or unset with OPENSHIFT_HA_UNICAST_PEERS_FROM=pods`},
		{"pod name", func(r *Raw) { r.PeersFrom, r.PodName = "pods", "Web_1" }, `POD_NAME="Web_1": not a pod name`},
		{"pod name injection", func(r *Raw) { r.PodName = "a\n}" }, "POD_NAME"},
		{"pod namespace", func(r *Raw) { r.PodNamespace = "a.b" }, `POD_NAMESPACE="a.b": not a namespace name`},
		{"bridge bool", func(r *Raw) { r.MulticastBridge = "auto" }, `OPENSHIFT_HA_MULTICAST_BRIDGE="auto": must be true, false or unset`},
		{"bridge without unicast", func(r *Raw) { r.MulticastBridge = "true" }, "it needs OPENSHIFT_HA_UNICAST_PEERS_FROM or OPENSHIFT_HA_UNICAST_PEERS"},
		{"too many ids", func(r *Raw) { r.VirtualIPs, r.Offset = "192.0.2.1-20", "240" }, "20 VRRP instances need router ids up to 260"},
		{"too many ids with exclusions", func(r *Raw) { r.VirtualIPs, r.Offset, r.Excluded = "192.0.2.1-6", "249", "250" }, "5 instances fit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mutate(&r)
			_, err := Parse(r)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Parse = %v, want an error with %q", err, tt.msg)
			}
		})
	}
}

// TestCheckInterval: OPENSHIFT_HA_CHECK_INTERVAL keeps its meaning (a
// period in seconds) where it is set; unset, the built-in port check runs
// at its sub-second default and a check keepalived runs at the shipped 2 s.
func TestCheckInterval(t *testing.T) {
	for _, tt := range []struct {
		name  string
		raw   Raw
		check Check
		want  time.Duration
	}{
		{name: "port check default", raw: Raw{}, check: CheckPort, want: DefaultPortCheckInterval},
		{name: "port check set", raw: Raw{CheckInterval: "2"}, check: CheckPort, want: 2 * time.Second},
		{name: "port check tenths", raw: Raw{CheckInterval: "0.5"}, check: CheckPort, want: 500 * time.Millisecond},
		{name: "port check hundredths", raw: Raw{CheckInterval: "1.25"}, check: CheckPort, want: 1250 * time.Millisecond},
		{name: "port check shortest", raw: Raw{CheckInterval: "0.02"}, check: CheckPort, want: 20 * time.Millisecond},
		{name: "port check longest", raw: Raw{CheckInterval: "3600"}, check: CheckPort, want: time.Hour},
		{name: "script default", raw: Raw{CheckScript: "/bin/true"}, check: CheckScript, want: 2 * time.Second},
		{name: "script set", raw: Raw{CheckScript: "/bin/true", CheckInterval: "7"}, check: CheckScript, want: 7 * time.Second},
		{name: "no check default", raw: Raw{MonitorPort: "0"}, check: CheckNone, want: 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.raw.VirtualIPs = "192.0.2.1"
			c, err := Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			if c.Check != tt.check || c.CheckInterval != tt.want {
				t.Errorf("check %d every %s, want %d every %s", c.Check, c.CheckInterval, tt.check, tt.want)
			}
		})
	}
}

func TestCheckTarget(t *testing.T) {
	c, err := Parse(Raw{VirtualIPs: "192.0.2.100", MonitorPort: "8080"})
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")
	for _, tt := range []struct {
		name string
		node Node
		want string
	}{
		{"dual stack: IPv4", Node{Addr4: v4, Addr6: v6}, "192.0.2.11:8080"},
		{"IPv6 only", Node{Addr6: v6}, "[2001:db8::11]:8080"},
		{"no address of its own", Node{}, "192.0.2.100:8080"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.CheckTarget(tt.node).String(); got != tt.want {
				t.Errorf("CheckTarget = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse(Raw{VirtualIPs: "nope", MonitorPort: "x", Offset: "999", Preemption: "never"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, name := range []string{"OPENSHIFT_HA_VIRTUAL_IPS", "OPENSHIFT_HA_MONITOR_PORT", "OPENSHIFT_HA_VRRP_ID_OFFSET", "OPENSHIFT_HA_PREEMPTION"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 4 {
		t.Errorf("want one line per bad variable (4), got %d:\n%v", n, err)
	}
}

func TestUnicastUnlessExplicitlyOff(t *testing.T) {
	for _, tt := range []struct {
		use, peers string
		want       bool
	}{
		{"", "192.0.2.11", true}, // the shipped image: peers turn it on
		{"", "", false},
		{"false", "192.0.2.11", false},
		{"true", "192.0.2.11", true},
	} {
		c, err := Parse(Raw{VirtualIPs: "192.0.2.1", UseUnicast: tt.use, UnicastPeers: tt.peers})
		if err != nil {
			t.Fatal(err)
		}
		if c.Unicast != tt.want {
			t.Errorf("USE_UNICAST=%q PEERS=%q: unicast %v, want %v", tt.use, tt.peers, c.Unicast, tt.want)
		}
	}
}

// TestPeersFromPods: OPENSHIFT_HA_UNICAST_PEERS_FROM=pods is unicast with
// no static peers (so no family check on them), the pod's identity is
// kept, and only the commands that call the API server need POD_NAME.
func TestPeersFromPods(t *testing.T) {
	c, err := Parse(Raw{VirtualIPs: "192.0.2.1,2001:db8::1", PeersFrom: "pods", PodName: "ipfailover-5d9c-x2x4q", PodNamespace: "ipfailover"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Unicast || !c.PeersFromPods || c.UnicastPeers != nil || c.PodName != "ipfailover-5d9c-x2x4q" || c.PodNamespace != "ipfailover" || c.MulticastBridge != BridgeAuto {
		t.Errorf("got unicast %v, from pods %v, peers %v, pod %s/%s, bridge %s", c.Unicast, c.PeersFromPods, c.UnicastPeers, c.PodNamespace, c.PodName, c.MulticastBridge)
	}
	if err := c.CheckPodName(); err != nil {
		t.Error(err)
	}
	c, err = Parse(Raw{VirtualIPs: "192.0.2.1", PeersFrom: "pods", UseUnicast: "true", MulticastBridge: "false"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MulticastBridge != BridgeOff {
		t.Errorf("bridge %s, want off", c.MulticastBridge)
	}
	if err := c.CheckPodName(); err == nil || !strings.Contains(err.Error(), "POD_NAME is not set") {
		t.Errorf("CheckPodName = %v, want POD_NAME is not set", err)
	}
	c, err = Parse(Raw{VirtualIPs: "192.0.2.1", UnicastPeers: "192.0.2.11", MulticastBridge: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if c.PeersFromPods || c.MulticastBridge != BridgeOn || c.CheckPodName() != nil {
		t.Errorf("static peers: from pods %v, bridge %s, CheckPodName %v", c.PeersFromPods, c.MulticastBridge, c.CheckPodName())
	}
}

func TestSplit(t *testing.T) {
	sizes := func(gs []Group) []int {
		var out []int
		for _, g := range gs {
			out = append(out, len(g.VIPs))
		}
		return out
	}
	seven, _ := ParseVIPs("192.0.2.1-7")
	for _, tt := range []struct {
		name   string
		vips   []netip.Addr
		groups int
		want   []int
	}{
		{"one per vip", seven, 0, []int{1, 1, 1, 1, 1, 1, 1}},
		{"7 in 3", seven, 3, []int{3, 2, 2}},
		{"7 in 1", seven, 1, []int{7}},
		{"7 in 7", seven, 7, []int{1, 1, 1, 1, 1, 1, 1}},
		{"7 in 10", seven, 10, []int{1, 1, 1, 1, 1, 1, 1}},
		{"mixed split", addrs("192.0.2.1", "2001:db8::1", "192.0.2.2"), 1, []int{2, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, sizes(Split(tt.vips, tt.groups))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRouterIDs(t *testing.T) {
	for _, tt := range []struct {
		name     string
		raw      Raw
		want     []RouterID
		wantPart []string
	}{
		{name: "default offset", raw: Raw{VirtualIPs: "192.0.2.1-3"}, want: []RouterID{11, 12, 13}},
		{name: "offset 0", raw: Raw{VirtualIPs: "192.0.2.1-3", Offset: "0"}, want: []RouterID{1, 2, 3}},
		{name: "documented exclusion", raw: Raw{VirtualIPs: "192.0.2.1-5", Offset: "50", Excluded: "52 53"}, want: []RouterID{51, 54, 55, 56, 57}},
		{name: "exclusion commas", raw: Raw{VirtualIPs: "192.0.2.1-3", ExcludedLong: "11,13"}, want: []RouterID{12, 14, 15}},
		{name: "last id 255", raw: Raw{VirtualIPs: "192.0.2.1-5", Offset: "250"}, want: []RouterID{251, 252, 253, 254, 255}},
		{name: "split parts share the id", raw: Raw{VirtualIPs: "192.0.2.1,2001:db8::1,192.0.2.2,2001:db8::2", VIPGroups: "2"},
			want: []RouterID{11, 11, 12, 12}, wantPart: []string{"", "v6", "", "v6"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			var got []RouterID
			var parts []string
			for _, g := range c.Groups {
				got = append(got, g.RouterID)
				parts = append(parts, g.Part)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("router ids (-want +got):\n%s", diff)
			}
			if tt.wantPart != nil {
				if diff := cmp.Diff(tt.wantPart, parts); diff != "" {
					t.Errorf("parts (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestOnPremRouterIDs(t *testing.T) {
	for _, tt := range []struct {
		cluster      string
		api, ingress RouterID
	}{
		// A vSphere IPI cluster named "vmware" renders virtual_router_id
		// 109 (API) and 124 (Ingress) in its keepalived.conf.
		{"vmware", 109, 124},
	} {
		api, ingress := OnPremRouterIDs(tt.cluster)
		if api != tt.api || ingress != tt.ingress || api == ingress {
			t.Errorf("OnPremRouterIDs(%q) = %d, %d; want %d, %d", tt.cluster, api, ingress, tt.api, tt.ingress)
		}
	}
	// fletcher8 of "abc": a = 97%15=7, b=7; a=(7+98)%15=0, b=7; a=(0+99)%15=9, b=(7+9)%15=1 → 0x19.
	if got := fletcher8("abc"); got != 0x19 {
		t.Errorf("fletcher8(abc) = %#x, want 0x19", got)
	}
}

// With the peers from the pods keepalived speaks VRRPv3 whatever the
// interval, so that no setting of a pod leaves it unable to hear the
// others; otherwise VRRPv2 but for fractions of a second. BridgeAdverts,
// what the nodes that do not follow the pods speak, is the setting or 1 s.
func TestAdverts(t *testing.T) {
	for _, tt := range []struct {
		name           string
		raw            Raw
		interval       time.Duration
		v3             bool
		bridgeInterval time.Duration
		bridgeV3       bool
	}{
		{"pods", Raw{PeersFrom: "pods", PodName: "p"}, FastAdvertInterval, true, time.Second, false},
		{"pods, explicit", Raw{PeersFrom: "pods", PodName: "p", AdvertInterval: "1"}, time.Second, true, time.Second, false},
		{"pods, explicit 2 s", Raw{PeersFrom: "pods", PodName: "p", AdvertInterval: "2"}, 2 * time.Second, true, 2 * time.Second, false},
		{"pods, explicit fraction", Raw{PeersFrom: "pods", PodName: "p", AdvertInterval: "0.5"}, 500 * time.Millisecond, true, 500 * time.Millisecond, true},
		{"pods, the bridge forced on", Raw{PeersFrom: "pods", PodName: "p", MulticastBridge: "true"}, FastAdvertInterval, true, time.Second, false},
		{"static peers", Raw{UnicastPeers: "192.0.2.11,192.0.2.12"}, time.Second, false, time.Second, false},
		{"static peers, fraction", Raw{UnicastPeers: "192.0.2.11,192.0.2.12", AdvertInterval: "0.3"}, 300 * time.Millisecond, true, 300 * time.Millisecond, true},
		{"multicast", Raw{}, time.Second, false, time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.raw.VirtualIPs = "192.0.2.100"
			c, err := Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			interval, v3 := c.Adverts()
			if interval != tt.interval || v3 != tt.v3 {
				t.Errorf("Adverts = %v, v3 %v; want %v, v3 %v", interval, v3, tt.interval, tt.v3)
			}
			interval, v3 = c.BridgeAdverts()
			if interval != tt.bridgeInterval || v3 != tt.bridgeV3 {
				t.Errorf("BridgeAdverts = %v, v3 %v; want %v, v3 %v", interval, v3, tt.bridgeInterval, tt.bridgeV3)
			}
		})
	}
}

// TestFastInterval: past 200 VRRP instances the fast interval grows, in
// hundredths of a second, so that the fleet sends at most FastAdvertRate
// adverts a second; an explicit interval is untouched.
func TestFastInterval(t *testing.T) {
	for _, tt := range []struct {
		vips string
		want time.Duration
	}{
		{"192.0.2.100", 200 * time.Millisecond},
		{"192.0.2.1-200", 200 * time.Millisecond},
		{"192.0.2.1-201", 210 * time.Millisecond},
		{"192.0.2.1-210", 210 * time.Millisecond},
		{"192.0.2.1-211", 220 * time.Millisecond},
		{"192.0.2.1-254", 260 * time.Millisecond},
		// IPv6 instances send adverts too.
		{"192.0.2.1-150,2001:db8::1-50", 230 * time.Millisecond}, // 0x50 = 80
	} {
		t.Run(tt.vips, func(t *testing.T) {
			c, err := Parse(Raw{PeersFrom: "pods", PodName: "p", VirtualIPs: tt.vips, Offset: "0"})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.FastInterval(); got != tt.want {
				t.Errorf("FastInterval with %d instances = %v, want %v", len(c.Groups), got, tt.want)
			}
			interval, v3 := c.Adverts()
			if interval != tt.want || !v3 {
				t.Errorf("Adverts = %v, v3 %v; want %v, v3", interval, v3, tt.want)
			}
		})
	}
	c, err := Parse(Raw{PeersFrom: "pods", PodName: "p", VirtualIPs: "192.0.2.1-254", Offset: "0", AdvertInterval: "0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if interval, _ := c.Adverts(); interval != 200*time.Millisecond {
		t.Errorf("Adverts with OPENSHIFT_HA_ADVERT_INTERVAL=0.2 and 254 instances = %v, want 200ms", interval)
	}
}
