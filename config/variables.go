package config

import (
	"fmt"
	"time"
)

// Setting is one environment variable the program reads, as the settings
// reference (docs/reference/settings.md, generated from Settings) tells a
// user. The texts are Markdown; links in them are relative to the
// repository's top.
type Setting struct {
	Name string
	// Default is what the variable means unset (or empty, except where
	// Meaning says otherwise).
	Default string
	// Meaning says what a value does and which values are valid.
	Meaning string
	// New marks a variable the shipped image does not read.
	New bool
	// Shipped says how the variable compares with the shipped image's
	// handling (or lack) of it; empty when there is nothing to add.
	Shipped string
}

// Settings lists every environment variable the program reads, in the
// order the settings reference documents them. It is the one home of the
// variables' names, defaults and meanings: the reference is rendered from
// it, and manifests and docs are checked against it.
func Settings() []Setting {
	return []Setting{
		{
			Name:    "OPENSHIFT_HA_CONFIG_NAME",
			Default: code(DefaultConfigName),
			Meaning: "names `router_id`, the instances `<scrubbed>_VIP_<n>` and `chk_<name>`; the raw value is the VRRP `auth_pass` (keepalived keeps 8 characters)",
			Shipped: "letters, digits, `_`, `-`, `.` only: a space or brace used to break the file",
		},
		{
			Name:    "OPENSHIFT_HA_VIRTUAL_IPS",
			Default: "required",
			Meaning: "comma- (or space-) separated addresses and ranges: `192.0.2.100-102`, `2001:db8::1f39-1f3b` (either case), `192.0.2.10-192.0.2.12`",
			Shipped: "refuses descending ranges, ranges crossing the last octet/group, duplicates, prefixes (`/24`), non-unicast addresses; the shipped image silently dropped such characters or entries",
		},
		{
			Name:    "OPENSHIFT_HA_VIP_GROUPS",
			Default: "unset (one instance per VIP)",
			Meaning: "spread V VIPs over G instances: V/G each, the first V%G one more",
			Shipped: "same; a group mixing IPv4 and IPv6 is split in two, one instance per address family",
		},
		{
			Name:    "OPENSHIFT_HA_NETWORK_INTERFACE",
			Default: "interface of the default route (IPv4, else IPv6)",
			Meaning: "interface for VRRP and the VIPs",
			Shipped: "a name that does not exist is an error listing the interfaces there are, not a silent fallback to another one",
		},
		{
			Name:    "OPENSHIFT_HA_MONITOR_PORT",
			Default: code(DefaultMonitorPort),
			Meaning: "default check: TCP connect to the node's own address on this port, run by ipfailover itself; `0` turns the check off",
			Shipped: "non-digits are an error (the shipped image deleted them); keepalived no longer runs bash for it",
		},
		{
			Name:    "OPENSHIFT_HA_VRRP_ID_OFFSET",
			Default: code(DefaultOffset),
			Meaning: "router ids are offset+1, offset+2, … in instance order; 0..254",
			Shipped: "same; running past 255 is an error that says how many instances fit",
		},
		{
			Name:    "HA_EXCLUDED_VRRP_IDS",
			Default: "unset",
			Meaning: "ids to skip, space- or comma-separated; an excluded id grows the offset for every later instance",
			Shipped: "same ids; commas accepted",
		},
		{
			Name:    "OPENSHIFT_HA_EXCLUDED_VRRP_IDS",
			Default: "unset",
			Meaning: "the same as `HA_EXCLUDED_VRRP_IDS`, read when that is unset; a different value beside it is an error",
			Shipped: "same ids; commas accepted",
		},
		{
			Name:    "OPENSHIFT_HA_REPLICA_COUNT",
			Default: code(DefaultReplicaCount),
			Meaning: "number of pods; only shapes multicast priorities",
			Shipped: "0 or text is an error",
		},
		{
			Name:    "OPENSHIFT_HA_USE_UNICAST",
			Default: "unset",
			Meaning: "`true` turns unicast on (needs peers), `false` off",
			Shipped: "unset keeps the shipped rule: peers turn unicast on",
		},
		{
			Name:    "OPENSHIFT_HA_UNICAST_PEERS",
			Default: "unset",
			Meaning: "comma-separated node addresses; the node's own address is dropped from its list, so one list serves every pod",
			Shipped: "`unicast_src_ip` is set to the node's address; peers are split by family",
		},
		{
			Name:    "OPENSHIFT_HA_UNICAST_PEERS_FROM",
			Default: "unset",
			Meaning: "`pods`: unicast VRRP, the peers being the other pods of this pod's workload, followed from the API server (needs `POD_NAME`, the service account token and the Role of [concepts](docs/concepts.md#unicast-peers-from-the-pods)); not with `OPENSHIFT_HA_UNICAST_PEERS`. The manifests set it",
			New:     true,
		},
		{
			Name:    "OPENSHIFT_HA_MULTICAST_BRIDGE",
			Default: "unset (automatic)",
			Meaning: "`true`: a unicast node relays its masterships to nodes that still speak multicast VRRP, with priority-255 adverts to the multicast group (a migration); unset: on while pods of the workload publish no unicast address (`OPENSHIFT_HA_UNICAST_PEERS_FROM=pods` only); `false`: never ([installation](docs/installation.md#move-from-multicast-to-unicast))",
			New:     true,
		},
		{
			Name:    "POD_NAME",
			Default: "unset",
			Meaning: "the pod's name, from the Downward API; `OPENSHIFT_HA_UNICAST_PEERS_FROM=pods` needs it",
			New:     true,
		},
		{
			Name:    "POD_NAMESPACE",
			Default: "the service account's namespace",
			Meaning: "the pod's namespace, from the Downward API; `OPENSHIFT_HA_UNICAST_PEERS_FROM=pods` reads it",
			New:     true,
		},
		{
			Name:    "OPENSHIFT_HA_IPTABLES_CHAIN",
			Default: "unset",
			Meaning: "the filter chain that gets `-d 224.0.0.18/32 -j ACCEPT` at its top (and `-d ff02::12/128 -j ACCEPT` with ip6tables when there are IPv6 VIPs). A missing chain is logged, not created",
			Shipped: "same rule text, so a mixed fleet never gets two copies",
		},
		{
			Name:    "OPENSHIFT_HA_NFTABLES_RULE",
			Default: "unset",
			Meaning: "any value: the table `inet keepalived` with an input chain accepting VRRP to 224.0.0.18 and ff02::12",
			Shipped: "same table name",
		},
		{
			Name:    "OPENSHIFT_HA_CHECK_SCRIPT",
			Default: "unset",
			Meaning: "absolute path (plain arguments allowed) run every `OPENSHIFT_HA_CHECK_INTERVAL`; exit status 0 = healthy; replaces the port check",
			Shipped: "must exist and be executable at start",
		},
		{
			Name:    "OPENSHIFT_HA_NOTIFY_SCRIPT",
			Default: "unset",
			Meaning: "called with `$1` GROUP/INSTANCE, `$2` name, `$3` MASTER/BACKUP/FAULT",
			Shipped: "must exist and be executable at start",
		},
		{
			Name:    "OPENSHIFT_HA_CHECK_INTERVAL",
			Default: fmt.Sprintf("%s for the port check, %s for a script", code(seconds(DefaultPortCheckInterval)), code(seconds(DefaultCheckInterval))),
			Meaning: "seconds between checks: for the port check 0.02..3600 in hundredths, for `OPENSHIFT_HA_CHECK_SCRIPT` (and port 0) whole seconds 1..3600",
			Shipped: fmt.Sprintf("unset, the port check runs every %s s, not %s s; set, it keeps its meaning", seconds(DefaultPortCheckInterval), seconds(DefaultCheckInterval)),
		},
		{
			Name:    "OPENSHIFT_HA_PREEMPTION",
			Default: code(Preemption{Delay: DefaultPreemptDelay}),
			Meaning: "`nopreempt` or `preempt_delay N` (0..1000 s)",
			Shipped: "with `nopreempt` no instance starts as MASTER (as the shipped image does)",
		},
		{
			Name:    "OPENSHIFT_HA_ADMIN_EMAILS",
			Default: code(DefaultAdminEmail),
			Meaning: "space-separated `notification_email` list",
			Shipped: "each must look like an address",
		},
		{
			Name:    "OPENSHIFT_HA_SMTP_SERVER",
			Default: code(DefaultSMTPServer),
			Meaning: "`smtp_server`",
			Shipped: "IP or host name",
		},
		{
			Name:    "OPENSHIFT_HA_SELECTOR",
			Default: "unset",
			Meaning: "read and ignored, as the shipped image does",
		},
		{
			Name:    "MULTICAST_SOURCE_IPADDRESS",
			Default: "unset",
			Meaning: "`mcast_src_ip`",
		},
		{
			Name:    "UNICAST_SOURCE_IPADDRESS",
			Default: "the node's address",
			Meaning: "`unicast_src_ip`",
		},
		{
			Name:    "KEEPALIVED_CONFIG",
			Default: code(DefaultKeepalivedConfig),
			Meaning: "where the config is written",
		},
		{
			Name:    "KEEPALIVED_OPTIONS",
			Default: "unset",
			Meaning: "extra keepalived flags, also read from `/etc/sysconfig/keepalived` (`KEEPALIVED_OPTIONS=\"-D\"`)",
			Shipped: "split like a shell would, without running one; flags that break supervision (`-f`, `-p`, `-t`, …) are refused",
		},
		{
			Name:    "OPENSHIFT_HA_ADVERT_INTERVAL",
			Default: "unset: " + code(seconds(FastAdvertInterval)) + " with `OPENSHIFT_HA_UNICAST_PEERS_FROM=pods` (longer past " + fmt.Sprint(int64(FastAdvertRate*FastAdvertInterval/time.Second)) + " VRRP instances, so that they send at most " + fmt.Sprint(FastAdvertRate) + " adverts a second: " + code(seconds(FastIntervalFor(254))) + " at 254); " + code(seconds(DefaultAdvertInterval)) + " otherwise",
			Meaning: "VRRP advert interval in seconds; a dead node's VIPs move after 3 of them. With the peers from the pods every pod speaks VRRPv3, at this interval or the fast one, and pods at different intervals hear each other. Otherwise whole seconds are VRRPv2 and fractions (`0.1`) VRRPv3, and every node of the VRRP domain must use the same value. The multicast bridge speaks it, or 1 s, to the nodes that do not follow the pods ([concepts](docs/concepts.md#advert-interval))",
			New:     true,
		},
		{
			Name:    "OPENSHIFT_HA_METRICS_ADDRESS",
			Default: code(DefaultMetricsAddress),
			Meaning: "where metrics and health listen; set but empty turns them off",
			New:     true,
			Shipped: "replaces the exporter sidecar",
		},
		{
			Name:    "OPENSHIFT_HA_GARP_MASTER_REFRESH",
			Default: "unset (off)",
			Meaning: "whole seconds 1..86400 (0 or unset: off): a master announces each of its VIPs again this often (keepalived's `vrrp_garp_master_refresh`; the announcements go out with the first advert after the period, so within period + advert interval). Use it when switches or routers between the nodes and the clients keep a stale ARP or neighbour entry until it ages out after a switch-over whose gratuitous ARPs they lost; OpenShift's on-prem keepalived templates use `60`. Each refresh is one gratuitous ARP or unsolicited NA per VIP (times the repeat) on the whole segment",
			New:     true,
			Shipped: "off, as in the shipped image, which cannot set it",
		},
		{
			Name:    "OPENSHIFT_HA_GARP_MASTER_REFRESH_REPEAT",
			Default: code(1),
			Meaning: "announcements per VIP at each refresh, 1..100 (keepalived's `vrrp_garp_master_refresh_repeat`); needs `OPENSHIFT_HA_GARP_MASTER_REFRESH`",
			New:     true,
		},
	}
}

// Variables lists the names of Settings, in its order.
func Variables() []string {
	s := Settings()
	names := make([]string, len(s))
	for i, v := range s {
		names[i] = v.Name
	}
	return names
}

// code is v as Markdown code.
func code(v any) string { return fmt.Sprintf("`%v`", v) }

// seconds is d as the variables write it: seconds, with a fraction only
// when there is one.
func seconds(d time.Duration) string { return fmt.Sprint(d.Seconds()) }
