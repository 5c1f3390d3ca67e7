package splitbrain

import (
	"net/netip"
	"time"
)

// Why this node's keepalived became MASTER of an instance, as the wire
// told it (Takeover.Cause).
const (
	// CauseStart: no other node's advert for the instance was heard since
	// this keepalived started: nobody held it.
	CauseStart = "start"
	// CauseHandover: the master's last advert had priority 0: it stopped
	// (a rollout, a deleted pod) or gave the instance up (its check
	// failed), and said so.
	CauseHandover = "handover"
	// CauseSilent: the master fell silent for the master-down interval: a
	// dead, frozen or cut-off node, or a VRRP path that broke.
	CauseSilent = "silent"
	// CausePreemption: the master was heard until the takeover, at a lower
	// priority: this node took the instance back (it starts as master of
	// the instances it prefers, or its preemption delay ended).
	CausePreemption = "preemption"
)

// Why this node's keepalived left MASTER of an instance (Release.Cause).
const (
	// ReleaseStop: keepalived stopped (the pod is stopping, or keepalived
	// is restarted): it sent priority 0.
	ReleaseStop = "stop"
	// ReleaseFault: the instance went to FAULT: the check failed, or the
	// interface went down.
	ReleaseFault = "fault"
	// ReleaseHigherPriority: another node's advert of a higher priority:
	// preemption by a node that prefers it, or the end of a split brain.
	ReleaseHigherPriority = "higher-priority"
)

// Takeover is an instance this node's keepalived became MASTER of.
type Takeover struct {
	Instance string
	VIPs     []netip.Addr
	// At is when keepalived said so (its notify FIFO line).
	At    time.Time
	Cause string
	// From is the source of the last advert of another node heard for the
	// instance before At, and LastAdvert when it arrived; both zero when
	// none was heard (CauseStart).
	From       netip.Addr
	LastAdvert time.Time
	// Announced is when this node first announced one of the VIPs after
	// At (a gratuitous ARP or an unsolicited neighbour advertisement);
	// zero when it was not seen.
	Announced time.Time
}

// Release is an instance this node's keepalived left MASTER of.
type Release struct {
	Instance string
	VIPs     []netip.Addr
	At       time.Time
	Cause    string
	// To is the source of the higher priority heard (ReleaseHigherPriority),
	// zero otherwise.
	To netip.Addr
}
