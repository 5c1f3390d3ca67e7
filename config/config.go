// Package config turns the OPENSHIFT_HA_* environment into a typed,
// validated configuration. It is pure: no file, network or process access.
// Facts about the node (interface, address) come in through Node, and the
// VRRP instances this node runs are computed by Config.Instances.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/iptables"
	"github.com/kelseyhightower/envconfig"
)

// Defaults, as the shipped image has them.
const (
	DefaultConfigName   = "OpenShift-IPFailover"
	DefaultMonitorPort  = 80
	DefaultOffset       = 10
	DefaultReplicaCount = 2
	// DefaultCheckInterval is the period of a check keepalived runs: the
	// user's script (and the no-op check of port 0), as the shipped image.
	DefaultCheckInterval = 2 * time.Second
	// DefaultPortCheckInterval is the period of the built-in port check,
	// chosen from measurements (see internal/check).
	DefaultPortCheckInterval = 150 * time.Millisecond
	DefaultPreemptDelay      = 300 * time.Second
	DefaultAdminEmail        = "root@localhost"
	DefaultSMTPServer        = "127.0.0.1"
	DefaultKeepalivedConfig  = "/etc/keepalived/keepalived.conf"
	DefaultMetricsAddress    = ":9650"
	DefaultAdvertInterval    = time.Second
	// FastAdvertInterval is the advert interval of the pods of a workload
	// whose peers come from the pods, OPENSHIFT_HA_ADVERT_INTERVAL unset,
	// up to 200 VRRP instances (FastAdvertRate): VRRPv3, a dead holder's
	// VIPs taken after three of them. Chosen from measurements
	// (docs/performance.md).
	FastAdvertInterval = 200 * time.Millisecond
	// FastAdvertRate is the most adverts a second a fleet at the fast
	// interval sends, over all its VRRP instances: past
	// FastAdvertRate × FastAdvertInterval instances (200) the fast
	// interval grows with their number (Config.FastInterval). Each advert
	// wakes keepalived on every node about once (the sender's timer, or
	// the advert's arrival), so a node's CPU follows this rate, not the
	// number of nodes; at 254 instances and 0.2 s keepalived alone took
	// 4-5 % of a core per node. At the router ids' ceiling (254 or 255
	// instances) the interval is 0.26 s, and a dead node's VIPs move
	// after about 0.8 s (docs/concepts.md#advert-interval).
	FastAdvertRate = 1000
)

// Raw holds the variables as the environment gives them. envconfig fills
// it; each field names its variable exactly (no split_words guessing), and
// no field is "required" so that Parse can report every problem at once.
// An empty value counts as unset, as it does for the shipped image's
// ${VAR:-default}, except for the metrics address where empty means off.
type Raw struct {
	ConfigName      string `envconfig:"OPENSHIFT_HA_CONFIG_NAME"`
	VirtualIPs      string `envconfig:"OPENSHIFT_HA_VIRTUAL_IPS"`
	VIPGroups       string `envconfig:"OPENSHIFT_HA_VIP_GROUPS"`
	Interface       string `envconfig:"OPENSHIFT_HA_NETWORK_INTERFACE"`
	MonitorPort     string `envconfig:"OPENSHIFT_HA_MONITOR_PORT"`
	Offset          string `envconfig:"OPENSHIFT_HA_VRRP_ID_OFFSET"`
	Excluded        string `envconfig:"HA_EXCLUDED_VRRP_IDS"`
	ExcludedLong    string `envconfig:"OPENSHIFT_HA_EXCLUDED_VRRP_IDS"`
	ReplicaCount    string `envconfig:"OPENSHIFT_HA_REPLICA_COUNT"`
	UseUnicast      string `envconfig:"OPENSHIFT_HA_USE_UNICAST"`
	UnicastPeers    string `envconfig:"OPENSHIFT_HA_UNICAST_PEERS"`
	PeersFrom       string `envconfig:"OPENSHIFT_HA_UNICAST_PEERS_FROM"`
	MulticastBridge string `envconfig:"OPENSHIFT_HA_MULTICAST_BRIDGE"`
	IPTablesChain   string `envconfig:"OPENSHIFT_HA_IPTABLES_CHAIN"`
	NFTablesRule    string `envconfig:"OPENSHIFT_HA_NFTABLES_RULE"`
	CheckScript     string `envconfig:"OPENSHIFT_HA_CHECK_SCRIPT"`
	NotifyScript    string `envconfig:"OPENSHIFT_HA_NOTIFY_SCRIPT"`
	CheckInterval   string `envconfig:"OPENSHIFT_HA_CHECK_INTERVAL"`
	Preemption      string `envconfig:"OPENSHIFT_HA_PREEMPTION"`
	AdminEmails     string `envconfig:"OPENSHIFT_HA_ADMIN_EMAILS"`
	SMTPServer      string `envconfig:"OPENSHIFT_HA_SMTP_SERVER"`
	Selector        string `envconfig:"OPENSHIFT_HA_SELECTOR"`
	AdvertInterval  string `envconfig:"OPENSHIFT_HA_ADVERT_INTERVAL"`
	GARPRefresh     string `envconfig:"OPENSHIFT_HA_GARP_MASTER_REFRESH"`
	GARPRefreshRep  string `envconfig:"OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT"`
	MetricsAddress  string `envconfig:"OPENSHIFT_HA_METRICS_ADDRESS" default:":9650"`
	MulticastSource string `envconfig:"MULTICAST_SOURCE_IPADDRESS"`
	UnicastSource   string `envconfig:"UNICAST_SOURCE_IPADDRESS"`
	KeepalivedConf  string `envconfig:"KEEPALIVED_CONFIG"`
	KeepalivedOpts  string `envconfig:"KEEPALIVED_OPTIONS"`
	// PodName and PodNamespace are the pod's own name and namespace, from
	// the Downward API; OPENSHIFT_HA_UNICAST_PEERS_FROM=pods reads them.
	PodName      string `envconfig:"POD_NAME"`
	PodNamespace string `envconfig:"POD_NAMESPACE"`

	// Sysconfig is the content of SysconfigPath, where KEEPALIVED_OPTIONS
	// is read from when the variable is unset. The caller reads the file
	// (empty when it does not exist); it is not an environment variable.
	Sysconfig string `ignored:"true"`
}

// FromEnv reads the process environment into Raw.
func FromEnv() (Raw, error) {
	var r Raw
	if err := envconfig.Process("", &r); err != nil {
		return Raw{}, fmt.Errorf("reading the environment: %w", err)
	}
	return r, nil
}

// Check says how a node decides it can serve the VIPs.
type Check int

const (
	// CheckPort connects to the node's own address on MonitorPort. The
	// program runs it (internal/check) and tells keepalived the result
	// through a file keepalived watches.
	CheckPort Check = iota
	// CheckScript runs the user's script under keepalived.
	CheckScript
	// CheckNone always passes (MonitorPort 0).
	CheckNone
)

// Preemption is keepalived's preemption line.
type Preemption struct {
	// Never is nopreempt: a backup never takes over from a lower master.
	Never bool
	// Delay is preempt_delay when Never is false.
	Delay time.Duration
}

func (p Preemption) String() string {
	if p.Never {
		return "nopreempt"
	}
	return fmt.Sprintf("preempt_delay %d", int(p.Delay/time.Second))
}

// Bridge says whether a unicast node relays its mastership to nodes that
// still speak multicast VRRP (OPENSHIFT_HA_MULTICAST_BRIDGE).
type Bridge int

const (
	// BridgeAuto relays while the workload has pods that publish no
	// unicast address (pods on an older image or in multicast mode, during
	// a migration), with OPENSHIFT_HA_UNICAST_PEERS_FROM=pods; never with
	// static peers.
	BridgeAuto Bridge = iota
	// BridgeOn always relays.
	BridgeOn
	// BridgeOff never relays.
	BridgeOff
)

func (b Bridge) String() string {
	switch b {
	case BridgeOn:
		return "on"
	case BridgeOff:
		return "off"
	}
	return "auto"
}

// PeersFromPods is the value of OPENSHIFT_HA_UNICAST_PEERS_FROM that makes
// each pod find its unicast peers among the pods of its own workload.
const PeersFromPods = "pods"

// RouterID is a VRRP virtual_router_id, 1..255.
type RouterID uint8

// Config is the validated configuration.
type Config struct {
	// Name is OPENSHIFT_HA_CONFIG_NAME as given: the VRRP auth_pass.
	Name string
	// Scrubbed is Name with only [A-Za-z0-9_] kept, dashes made underscores:
	// router_id and the instance names.
	Scrubbed string
	VIPs     []netip.Addr
	// Groups are the VIP groups in instance order, with their router ids.
	Groups []Group
	// Interface is OPENSHIFT_HA_NETWORK_INTERFACE; empty means autodetect.
	Interface   string
	Check       Check
	MonitorPort uint16
	CheckScript string
	// CheckInterval is the check's period: OPENSHIFT_HA_CHECK_INTERVAL, or
	// DefaultPortCheckInterval for the built-in port check and
	// DefaultCheckInterval for a check keepalived runs. Whole seconds
	// unless Check is CheckPort.
	CheckInterval time.Duration
	NotifyScript  string
	Offset        int
	Excluded      []RouterID
	ReplicaCount  int
	Unicast       bool
	// UnicastPeers are OPENSHIFT_HA_UNICAST_PEERS; empty with PeersFromPods,
	// where the peers are the addresses the workload's other pods publish
	// (Node.Members).
	UnicastPeers []netip.Addr
	// PeersFromPods is OPENSHIFT_HA_UNICAST_PEERS_FROM=pods: unicast, with
	// the peers followed from the API server. PodName and PodNamespace name
	// this pod (POD_NAME, POD_NAMESPACE; either may be empty, see PodName).
	PeersFromPods bool
	PodName       string
	PodNamespace  string
	// MulticastBridge is OPENSHIFT_HA_MULTICAST_BRIDGE.
	MulticastBridge Bridge
	// IPTablesChain, when set, gets the rule accepting VRRP multicast.
	IPTablesChain string
	NFTables      bool
	Preemption    Preemption
	AdminEmails   []string
	SMTPServer    string
	// AdvertInterval is OPENSHIFT_HA_ADVERT_INTERVAL, DefaultAdvertInterval
	// when unset: advert_int without the peers from the pods, and what
	// the nodes that do not follow the pods speak (BridgeAdverts).
	AdvertInterval time.Duration
	// AdvertIntervalSet says that OPENSHIFT_HA_ADVERT_INTERVAL is set:
	// with the peers from the pods it replaces the fast interval.
	AdvertIntervalSet bool
	// GARPRefresh is how often a master announces its VIPs again
	// (keepalived's vrrp_garp_master_refresh), 0 for never; each time it
	// sends GARPRefreshRepeat announcements per VIP.
	GARPRefresh       time.Duration
	GARPRefreshRepeat int
	MulticastSource   netip.Addr
	UnicastSource     netip.Addr
	KeepalivedConfig  string
	// KeepalivedFlags are the extra keepalived flags, from
	// KEEPALIVED_OPTIONS or SysconfigPath.
	KeepalivedFlags []string
	// MetricsAddress is where :9650 listens; empty turns it off.
	MetricsAddress string
}

// Group is one VRRP instance's worth of VIPs, all of one address family.
type Group struct {
	// Index is n in <name>_VIP_<n>, from 1, as the shipped image counts.
	Index int
	// Part is "" for the group as the shipped image forms it, or "v6"/"v4"
	// for the family split off a group the shipped image would mix.
	Part     string
	RouterID RouterID
	VIPs     []netip.Addr
}

// Is6 says whether the group's VIPs are IPv6.
func (g Group) Is6() bool { return g.VIPs[0].Is6() }

// problems collects one message per bad variable.
type problems []error

func (p *problems) add(name, value, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s=%q: %s", name, value, fmt.Sprintf(format, args...)))
}

// Parse validates every variable and derives the VRRP groups. All problems
// are returned together, one line per variable.
func Parse(r Raw) (*Config, error) {
	var p problems
	c := &Config{
		Name:             or(r.ConfigName, DefaultConfigName),
		Interface:        r.Interface,
		IPTablesChain:    r.IPTablesChain,
		NFTables:         r.NFTablesRule != "",
		CheckScript:      r.CheckScript,
		NotifyScript:     r.NotifyScript,
		KeepalivedConfig: or(r.KeepalivedConf, DefaultKeepalivedConfig),
		MetricsAddress:   r.MetricsAddress,
	}

	if !tokenRE.MatchString(c.Name) {
		p.add("OPENSHIFT_HA_CONFIG_NAME", c.Name, "allowed are letters, digits, '_', '-' and '.' (1 to 64 characters): it names the instances and is the VRRP password")
	} else if c.Scrubbed = Scrub(c.Name); c.Scrubbed == "" {
		p.add("OPENSHIFT_HA_CONFIG_NAME", c.Name, "needs at least one letter, digit, '_' or '-'")
	}

	if r.VirtualIPs == "" {
		p = append(p, errors.New(`OPENSHIFT_HA_VIRTUAL_IPS is required: the VIPs to fail over, e.g. "192.0.2.100-102,2001:db8::10"`))
	} else if vips, err := ParseVIPs(r.VirtualIPs); err != nil {
		p.add("OPENSHIFT_HA_VIRTUAL_IPS", r.VirtualIPs, "%s", oneLine(err))
	} else {
		c.VIPs = vips
	}

	groups := intVar(&p, "OPENSHIFT_HA_VIP_GROUPS", r.VIPGroups, 0, 0, 255)
	if c.Interface != "" && !ifaceRE.MatchString(c.Interface) {
		p.add("OPENSHIFT_HA_NETWORK_INTERFACE", c.Interface, "not an interface name (up to 15 characters, no white space, '/' or ':')")
	}
	c.MonitorPort = uint16(intVar(&p, "OPENSHIFT_HA_MONITOR_PORT", r.MonitorPort, DefaultMonitorPort, 0, 65535))
	c.Offset = intVar(&p, "OPENSHIFT_HA_VRRP_ID_OFFSET", r.Offset, DefaultOffset, 0, 254)
	c.Excluded = excludedIDs(&p, r)
	c.ReplicaCount = intVar(&p, "OPENSHIFT_HA_REPLICA_COUNT", r.ReplicaCount, DefaultReplicaCount, 1, 255)

	switch {
	case c.CheckScript != "":
		c.Check = CheckScript
		scriptVar(&p, "OPENSHIFT_HA_CHECK_SCRIPT", c.CheckScript)
	case c.MonitorPort == 0:
		c.Check = CheckNone
	default:
		c.Check = CheckPort
	}
	c.CheckInterval = checkInterval(&p, r.CheckInterval, c.Check)
	if c.NotifyScript != "" {
		scriptVar(&p, "OPENSHIFT_HA_NOTIFY_SCRIPT", c.NotifyScript)
	}

	c.Preemption = preemption(&p, r.Preemption)
	c.AdvertInterval = advertInterval(&p, r.AdvertInterval)
	c.GARPRefresh, c.GARPRefreshRepeat = garpRefresh(&p, r.GARPRefresh, r.GARPRefreshRep)
	c.Unicast, c.UnicastPeers = unicast(&p, r.UseUnicast, r.UnicastPeers, r.PeersFrom)
	c.PeersFromPods = r.PeersFrom != "" && c.Unicast
	c.PodName, c.PodNamespace = podIdentity(&p, r.PodName, r.PodNamespace)
	c.MulticastBridge = bridge(&p, r.MulticastBridge, c.Unicast)
	c.AdvertIntervalSet = r.AdvertInterval != ""

	if c.IPTablesChain != "" {
		if err := iptables.CheckChainName(c.IPTablesChain); err != nil {
			p.add("OPENSHIFT_HA_IPTABLES_CHAIN", c.IPTablesChain, "%v", err)
		}
	}

	c.AdminEmails = strings.Fields(or(r.AdminEmails, DefaultAdminEmail))
	for _, e := range c.AdminEmails {
		if !emailRE.MatchString(e) {
			p.add("OPENSHIFT_HA_ADMIN_EMAILS", r.AdminEmails, "%q is not an e-mail address (space-separated list of user@host)", e)
		}
	}
	c.SMTPServer = or(r.SMTPServer, DefaultSMTPServer)
	if _, err := netip.ParseAddr(c.SMTPServer); err != nil && !hostRE.MatchString(c.SMTPServer) {
		p.add("OPENSHIFT_HA_SMTP_SERVER", c.SMTPServer, "not an IP address or host name")
	}

	c.MulticastSource = addrVar(&p, "MULTICAST_SOURCE_IPADDRESS", r.MulticastSource)
	c.UnicastSource = addrVar(&p, "UNICAST_SOURCE_IPADDRESS", r.UnicastSource)

	if !strings.HasPrefix(c.KeepalivedConfig, "/") || !pathRE.MatchString(c.KeepalivedConfig) {
		p.add("KEEPALIVED_CONFIG", c.KeepalivedConfig, "must be an absolute file path without white space or quotes")
	}
	if flags, err := keepalivedFlags(r.KeepalivedOpts, r.Sysconfig); err != nil {
		p = append(p, err)
	} else {
		c.KeepalivedFlags = flags
	}
	if c.MetricsAddress != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddress); err != nil || port == "" {
			p.add("OPENSHIFT_HA_METRICS_ADDRESS", c.MetricsAddress, "must be host:port or :port (empty turns metrics off)")
		}
	}

	if len(p) > 0 {
		return nil, errors.Join(p...)
	}

	c.Groups = Split(c.VIPs, groups)
	if err := assignRouterIDs(c.Groups, c.Offset, c.Excluded); err != nil {
		return nil, err
	}
	if err := c.checkFamilies(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkFamilies refuses combinations keepalived cannot run: unicast
// instances of a family no peer has, source addresses of the wrong family.
func (c *Config) checkFamilies() error {
	var has4, has6 bool
	for _, v := range c.VIPs {
		has4 = has4 || v.Is4()
		has6 = has6 || v.Is6()
	}
	var p problems
	if c.Unicast && !c.PeersFromPods {
		var peers4, peers6 bool
		for _, a := range c.UnicastPeers {
			peers4 = peers4 || a.Is4()
			peers6 = peers6 || a.Is6()
		}
		if has4 && !peers4 {
			p = append(p, fmt.Errorf("OPENSHIFT_HA_UNICAST_PEERS has no IPv4 address, but OPENSHIFT_HA_VIRTUAL_IPS has IPv4 VIPs: list every node's IPv4 address"))
		}
		if has6 && !peers6 {
			p = append(p, fmt.Errorf("OPENSHIFT_HA_UNICAST_PEERS has no IPv6 address, but OPENSHIFT_HA_VIRTUAL_IPS has IPv6 VIPs: list every node's IPv6 address"))
		}
	}
	for name, a := range map[string]netip.Addr{"MULTICAST_SOURCE_IPADDRESS": c.MulticastSource, "UNICAST_SOURCE_IPADDRESS": c.UnicastSource} {
		if a.IsValid() && has4 && has6 {
			p.add(name, a.String(), "cannot serve both IPv4 and IPv6 VIPs; leave it unset to use the node's address of each family")
		} else if a.IsValid() && (a.Is4() && !has4 || a.Is6() && !has6) {
			p.add(name, a.String(), "is of another address family than the VIPs")
		}
	}
	return errors.Join(p...)
}

// Scrub keeps letters, digits, '_' and '-', then turns '-' into '_', as the
// shipped image does for router_id and instance names.
func Scrub(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r == '-':
			b.WriteByte('_')
		}
	}
	return b.String()
}

// CheckPodName says what is missing for a command that reads the peers
// from the API server (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods): this pod's
// name, which only the Downward API gives (with host networking the host
// name is the node's). remove-failover, which reads the same settings, does
// not need it.
func (c *Config) CheckPodName() error {
	if c.PeersFromPods && c.PodName == "" {
		return fmt.Errorf("POD_NAME is not set: OPENSHIFT_HA_UNICAST_PEERS_FROM=%s needs this pod's name from the Downward API (env POD_NAME, valueFrom fieldRef metadata.name)", PeersFromPods)
	}
	return nil
}

// CheckScriptName is the vrrp_script name: chk_<name with '-' → '_'>.
func (c *Config) CheckScriptName() string {
	return "chk_" + strings.ReplaceAll(c.Name, "-", "_")
}

// CheckTarget is where the built-in port check connects: the node's own
// address, IPv4 when it has one, on MonitorPort.
func (c *Config) CheckTarget(node Node) netip.AddrPort {
	addr := node.Addr4
	if !addr.IsValid() {
		addr = node.Addr6
	}
	if !addr.IsValid() {
		addr = c.VIPs[0] // no address of its own: nothing better to probe
	}
	return netip.AddrPortFrom(addr, c.MonitorPort)
}

var (
	tokenRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,15}$`)
	emailRE = regexp.MustCompile(`^[A-Za-z0-9._%+=-]+@[A-Za-z0-9.-]+$`)
	hostRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$`)
	pathRE  = regexp.MustCompile(`^/[A-Za-z0-9_.,+=@%/-]*$`)
	// podNameRE is a DNS-1123 subdomain, namespaceRE a DNS-1123 label.
	podNameRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	namespaceRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// scriptRE allows an absolute path and arguments: no quotes,
	// backslashes, braces, comment or variable characters, no control bytes.
	scriptRE = regexp.MustCompile(`^/[A-Za-z0-9_.,+=@%/: -]*$`)
	advertRE = regexp.MustCompile(`^(\d{1,3})(?:\.(\d{1,2}))?$`)
	// intervalRE is seconds with at most hundredths.
	intervalRE = regexp.MustCompile(`^(\d{1,4})(?:\.(\d{1,2}))?$`)
)

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func intVar(p *problems, name, value string, def, lo, hi int) int {
	if value == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(value))
	if err != nil || n < lo || n > hi {
		p.add(name, value, "must be a whole number %d..%d", lo, hi)
		return def
	}
	return n
}

func addrVar(p *problems, name, value string) netip.Addr {
	if value == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(value)
	if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
		p.add(name, value, "must be a unicast IP address")
		return netip.Addr{}
	}
	return a
}

func scriptVar(p *problems, name, value string) {
	if !scriptRE.MatchString(value) {
		p.add(name, value, "must be an absolute path (optionally with plain arguments); quotes, backslashes, braces, '#', '!', '$' and line breaks are not allowed")
	}
}

func excludedIDs(p *problems, r Raw) []RouterID {
	name, value := "HA_EXCLUDED_VRRP_IDS", r.Excluded
	if value == "" {
		name, value = "OPENSHIFT_HA_EXCLUDED_VRRP_IDS", r.ExcludedLong
	} else if r.ExcludedLong != "" && r.ExcludedLong != r.Excluded {
		p.add("OPENSHIFT_HA_EXCLUDED_VRRP_IDS", r.ExcludedLong, "differs from HA_EXCLUDED_VRRP_IDS=%q: set one of them", r.Excluded)
	}
	var ids []RouterID
	for _, f := range strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 255 {
			p.add(name, value, "%q is not a router id 1..255 (list them separated by spaces or commas)", f)
			continue
		}
		ids = append(ids, RouterID(n))
	}
	return ids
}

func preemption(p *problems, value string) Preemption {
	if value == "" {
		return Preemption{Delay: DefaultPreemptDelay}
	}
	f := strings.Fields(value)
	switch {
	case len(f) == 1 && f[0] == "nopreempt":
		return Preemption{Never: true}
	case len(f) == 2 && f[0] == "preempt_delay":
		n, err := strconv.Atoi(f[1])
		if err == nil && n >= 0 && n <= 1000 {
			return Preemption{Delay: time.Duration(n) * time.Second}
		}
	}
	p.add("OPENSHIFT_HA_PREEMPTION", value, `must be "nopreempt" or "preempt_delay N" with N seconds 0..1000`)
	return Preemption{Delay: DefaultPreemptDelay}
}

// Adverts is the advert interval keepalived runs with, and whether it
// speaks VRRPv3 for IPv4 (IPv6 is always VRRPv3).
//
// With the peers from the pods every pod speaks VRRPv3, at
// OPENSHIFT_HA_ADVERT_INTERVAL when set, else at the fast interval
// (FastInterval): VRRPv3 routers at different intervals hear each other
// (a backup takes the master's interval from its adverts), so no setting
// of any pod and no moment of a rollout can leave two pods of the
// workload unable to hear each other. The nodes that speak VRRPv2 (the
// shipped image, older images, multicast mode) hear the multicast
// bridge, in their own VRRP (BridgeAdverts).
//
// Otherwise it is OPENSHIFT_HA_ADVERT_INTERVAL or 1 s, VRRPv3 for
// fractions of a second (VRRPv2 has whole seconds only), VRRPv2 else: what
// the shipped image speaks.
func (c *Config) Adverts() (interval time.Duration, v3 bool) {
	if c.PeersFromPods {
		if c.AdvertIntervalSet {
			return c.AdvertInterval, true
		}
		return c.FastInterval(), true
	}
	return c.BridgeAdverts()
}

// BridgeAdverts is the VRRP the nodes that do not follow the pods speak,
// as this node's settings give it (the same ConfigMap): OPENSHIFT_HA_ADVERT_INTERVAL
// or 1 s, VRRPv3 for a fraction of a second, VRRPv2 else. The multicast
// bridge relays this node's masters to them in it.
func (c *Config) BridgeAdverts() (interval time.Duration, v3 bool) {
	return c.AdvertInterval, c.AdvertInterval%time.Second != 0
}

// FastInterval is the fleet's fast advert interval for its VRRP
// instances: FastAdvertInterval, or with more than 200 instances the
// shortest whole number of hundredths of a second (VRRPv3's unit) at
// which they send at most FastAdvertRate adverts a second: 0.26 s at 254.
func (c *Config) FastInterval() time.Duration { return FastIntervalFor(len(c.Groups)) }

// FastIntervalFor is the fast advert interval of a fleet of instances
// VRRP instances (Config.FastInterval).
func FastIntervalFor(instances int) time.Duration {
	const unit = 10 * time.Millisecond
	per := time.Duration(instances) * time.Second / FastAdvertRate
	per = (per + unit - 1) / unit * unit
	return max(FastAdvertInterval, per)
}

func advertInterval(p *problems, value string) time.Duration {
	if value == "" {
		return DefaultAdvertInterval
	}
	m := advertRE.FindStringSubmatch(value)
	if m != nil {
		whole, _ := strconv.Atoi(m[1])
		frac, _ := strconv.Atoi((m[2] + "00")[:2])
		cs := whole*100 + frac
		switch {
		case frac == 0 && whole >= 1 && whole <= 255:
			return time.Duration(whole) * time.Second
		case frac != 0 && cs >= 1 && cs <= 4095:
			return time.Duration(cs) * 10 * time.Millisecond
		}
	}
	p.add("OPENSHIFT_HA_ADVERT_INTERVAL", value, "must be whole seconds 1..255, or a fraction 0.01..40.95 in hundredths (VRRPv3); every node must use the same value")
	return DefaultAdvertInterval
}

// The bounds of the gratuitous ARP refresh: a day at most (keepalived's
// bound for its other periodic announcements), and a few announcements at
// a time.
const (
	maxGARPRefresh       = 86400
	maxGARPRefreshRepeat = 100
)

// garpRefresh reads OPENSHIFT_HA_GARP_MASTER_REFRESH (whole seconds, 0 or
// unset: off) and its repeat count (1 unless set; only with a refresh).
func garpRefresh(p *problems, refresh, repeat string) (time.Duration, int) {
	secs := intVar(p, "OPENSHIFT_HA_GARP_MASTER_REFRESH", refresh, 0, 0, maxGARPRefresh)
	rep := intVar(p, "OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT", repeat, 1, 1, maxGARPRefreshRepeat)
	if off := strings.TrimSpace(refresh); repeat != "" && (off == "" || off == "0") {
		p.add("OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT", repeat, "needs OPENSHIFT_HA_GARP_MASTER_REFRESH, the period in seconds of the announcements it repeats (unset or 0: none)")
	}
	return time.Duration(secs) * time.Second, rep
}

// checkInterval reads OPENSHIFT_HA_CHECK_INTERVAL: seconds, as the shipped
// image reads it. The built-in port check also takes hundredths (it runs
// in this program); keepalived runs a script in whole seconds only.
func checkInterval(p *problems, value string, check Check) time.Duration {
	def := DefaultCheckInterval
	if check == CheckPort {
		def = DefaultPortCheckInterval
	}
	if value == "" {
		return def
	}
	m := intervalRE.FindStringSubmatch(strings.TrimSpace(value))
	if m != nil {
		whole, _ := strconv.Atoi(m[1])
		frac, _ := strconv.Atoi((m[2] + "00")[:2])
		d := time.Duration(whole)*time.Second + time.Duration(frac)*10*time.Millisecond
		switch {
		case check == CheckPort && d >= minPortCheckInterval && d <= maxCheckInterval:
			return d
		case frac == 0 && whole >= 1 && d <= maxCheckInterval:
			return d
		}
	}
	switch check {
	case CheckPort:
		p.add("OPENSHIFT_HA_CHECK_INTERVAL", value, "must be seconds 0.02..3600, in hundredths at most (e.g. 0.1 or 2)")
	case CheckScript:
		p.add("OPENSHIFT_HA_CHECK_INTERVAL", value, "must be whole seconds 1..3600: keepalived runs OPENSHIFT_HA_CHECK_SCRIPT at most once a second")
	default:
		p.add("OPENSHIFT_HA_CHECK_INTERVAL", value, "must be whole seconds 1..3600")
	}
	return def
}

// The bounds of OPENSHIFT_HA_CHECK_INTERVAL. The built-in check's shortest
// period is about the interval at which it probes anyway while a result is
// in doubt (internal/check).
const (
	minPortCheckInterval = 20 * time.Millisecond
	maxCheckInterval     = 3600 * time.Second
)

func unicast(p *problems, use, peers, from string) (bool, []netip.Addr) {
	if from != "" {
		return unicastFromPods(p, use, peers, from), nil
	}
	var list []netip.Addr
	for _, f := range strings.FieldsFunc(peers, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" || a.IsMulticast() || a.IsUnspecified() || a.IsLoopback() {
			p.add("OPENSHIFT_HA_UNICAST_PEERS", peers, "%q is not a unicast IP address (comma-separated node addresses)", f)
			continue
		}
		list = append(list, a)
	}
	on := len(list) > 0 // the shipped image: peers turn unicast on
	if use != "" {
		b, err := parseBool(use)
		if err != nil {
			p.add("OPENSHIFT_HA_USE_UNICAST", use, "must be true or false")
			return false, nil
		}
		on = b
		if b && peers == "" {
			p.add("OPENSHIFT_HA_USE_UNICAST", use, "needs OPENSHIFT_HA_UNICAST_PEERS, the comma-separated addresses of every node")
		}
	}
	if !on {
		return false, nil
	}
	return true, list
}

// unicastFromPods checks OPENSHIFT_HA_UNICAST_PEERS_FROM and what may go
// with it; it says whether the peers come from the pods.
func unicastFromPods(p *problems, use, peers, from string) bool {
	ok := true
	if from != PeersFromPods {
		p.add("OPENSHIFT_HA_UNICAST_PEERS_FROM", from, "must be %q (unicast, with the other pods of this pod's workload as peers) or unset", PeersFromPods)
		ok = false
	}
	if peers != "" {
		p.add("OPENSHIFT_HA_UNICAST_PEERS", peers, "cannot be set with OPENSHIFT_HA_UNICAST_PEERS_FROM=%s, which finds the peers itself: set one of them", from)
		ok = false
	}
	if use != "" {
		if b, err := parseBool(use); err != nil || !b {
			p.add("OPENSHIFT_HA_USE_UNICAST", use, "must be true or unset with OPENSHIFT_HA_UNICAST_PEERS_FROM=%s (which is unicast)", from)
			ok = false
		}
	}
	return ok
}

// podIdentity checks POD_NAME and POD_NAMESPACE where they are set.
// Whether they are needed depends on the command: see Config.PodName.
func podIdentity(p *problems, name, namespace string) (string, string) {
	if name != "" && !podNameRE.MatchString(name) {
		p.add("POD_NAME", name, "not a pod name (lower-case letters, digits, '-' and '.', up to 253 characters); give it from the Downward API: fieldRef metadata.name")
		name = ""
	}
	if namespace != "" && !namespaceRE.MatchString(namespace) {
		p.add("POD_NAMESPACE", namespace, "not a namespace name (lower-case letters, digits and '-', up to 63 characters); give it from the Downward API: fieldRef metadata.namespace")
		namespace = ""
	}
	return name, namespace
}

func bridge(p *problems, value string, unicast bool) Bridge {
	if value == "" {
		return BridgeAuto
	}
	b, err := parseBool(value)
	switch {
	case err != nil:
		p.add("OPENSHIFT_HA_MULTICAST_BRIDGE", value, "must be true, false or unset (automatic)")
		return BridgeAuto
	case !b:
		return BridgeOff
	case !unicast:
		p.add("OPENSHIFT_HA_MULTICAST_BRIDGE", value, "relays a unicast master's adverts to multicast nodes: it needs OPENSHIFT_HA_UNICAST_PEERS_FROM or OPENSHIFT_HA_UNICAST_PEERS")
		return BridgeAuto
	}
	return BridgeOn
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean")
}
