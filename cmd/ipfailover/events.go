package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/check"
	"github.com/ipfailover/ipfailover/internal/component"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/membership"
	"github.com/ipfailover/ipfailover/internal/plan"
	"github.com/ipfailover/ipfailover/internal/splitbrain"
)

// The reasons of the Events this program records on its pod (the REASON
// column of `kubectl get events`).
const (
	reasonVIPTaken            = "VIPTaken"
	reasonVIPReleased         = "VIPReleased"
	reasonSplitBrain          = "SplitBrain"
	reasonSplitBrainHealed    = "SplitBrainHealed"
	reasonCheckFailing        = "CheckFailing"
	reasonCheckPassing        = "CheckPassing"
	reasonAdvertInterval      = "AdvertInterval"
	reasonKeepalivedRestarted = "KeepalivedRestarted"
)

// operatorEvents says, as Events on this pod, what an operator needs to
// know: which VIPs this node took, from which node and why, released,
// held with another host, the check, the fleet's adverts, keepalived's
// deaths. A nil operatorEvents records nothing. Its methods never block.
type operatorEvents struct {
	ev *membership.Events
	// node is this node's name; podOf names the pod that publishes an
	// address (set once the peers from the pods run; nil otherwise).
	node  string
	mu    sync.Mutex
	podOf func(netip.Addr) string
}

// startEvents starts the writer of this pod's Events in group, with api's
// connection; nil (and a line that says why) when this program cannot
// write them: not in a pod, or no name for it.
func startEvents(log *slog.Logger, cfg *config.Config, api *membership.Client, group *component.Group) *operatorEvents {
	if api == nil || cfg.PodName == "" {
		log.Info("events: off; they need this pod's name (POD_NAME from the Downward API) and its service account")
		return nil
	}
	ns, err := membership.Namespace(cfg.PodNamespace)
	if err != nil {
		log.Info("events: off", "error", err)
		return nil
	}
	node, _ := os.Hostname()
	ev := membership.NewEvents(membership.EventsOptions{
		Client: api.Events, Pods: api, Namespace: ns, Pod: cfg.PodName, Instance: node, Logger: log,
	})
	group.Go("events", component.Auxiliary, ev.Run)
	return &operatorEvents{ev: ev, node: node}
}

// followPods names the peers by the pods that publish their addresses.
func (o *operatorEvents) followPods(pods *podPeers) {
	if o == nil || pods == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.podOf = func(a netip.Addr) string { return publisher(pods.w.View(), a) }
}

// peer names the node at a: its address, and its pod when one publishes it.
func (o *operatorEvents) peer(a netip.Addr) string {
	o.mu.Lock()
	podOf := o.podOf
	o.mu.Unlock()
	if podOf != nil {
		if pod := podOf(a); pod != "" {
			return fmt.Sprintf("%s (pod %s)", a, pod)
		}
	}
	return a.String()
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func vipList(vips []netip.Addr) string {
	s := make([]string, len(vips))
	for i, v := range vips {
		s[i] = v.String()
	}
	return strings.Join(s, ", ")
}

// took records a takeover: which VIPs, from which node, why, how fast.
func (o *operatorEvents) took(t splitbrain.Takeover) {
	if o == nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s took %s (%s)", o.node, vipList(t.VIPs), t.Instance)
	if t.From.IsValid() {
		fmt.Fprintf(&b, " from %s", o.peer(t.From))
	}
	switch t.Cause {
	case splitbrain.CauseSilent:
		b.WriteString(": its adverts stopped (a dead, frozen or cut-off node)")
	case splitbrain.CauseHandover:
		b.WriteString(": it gave the VIPs up (priority 0: it stopped, or its check failed)")
	case splitbrain.CausePreemption:
		b.WriteString(": this node prefers them (preemption)")
	case splitbrain.CauseStart:
		b.WriteString(": no other node held them")
	default:
		fmt.Fprintf(&b, ": %s", t.Cause)
	}
	if !t.LastAdvert.IsZero() {
		fmt.Fprintf(&b, "; MASTER %s after its last advert", seconds(t.At.Sub(t.LastAdvert)))
		if !t.Announced.IsZero() {
			fmt.Fprintf(&b, ", announced at %s", seconds(t.Announced.Sub(t.LastAdvert)))
		}
	}
	o.ev.Record(membership.Event{Reason: reasonVIPTaken, Action: "Take", Note: b.String()})
}

// released records a release and why.
func (o *operatorEvents) released(r splitbrain.Release) {
	if o == nil {
		return
	}
	e := membership.Event{Reason: reasonVIPReleased, Action: "Release"}
	why := r.Cause
	switch r.Cause {
	case splitbrain.ReleaseStop:
		why = "keepalived stopped and handed them over"
	case splitbrain.ReleaseFault:
		why = "FAULT: the check failed or the interface went down"
		e.Warning = true
	case splitbrain.ReleaseHigherPriority:
		why = "a node with a higher priority holds them (preemption, or the end of a split brain)"
		if r.To.IsValid() {
			why = fmt.Sprintf("%s, which has a higher priority, holds them (preemption, or the end of a split brain)", o.peer(r.To))
		}
	}
	e.Note = fmt.Sprintf("%s released %s (%s): %s", o.node, vipList(r.VIPs), r.Instance, why)
	o.ev.Record(e)
}

// duplicated records the start and end of another host answering for a
// VIP this node holds.
func (o *operatorEvents) duplicated(d splitbrain.Duplicate) {
	if o == nil {
		return
	}
	macs := make([]string, len(d.Others))
	for i, m := range d.Others {
		macs[i] = m.String()
	}
	others := strings.Join(macs, ", ")
	switch {
	case d.Started:
		o.ev.Record(membership.Event{Warning: true, Reason: reasonSplitBrain, Action: "Probe",
			Note: fmt.Sprintf("another host (MAC %s) answers for %s (%s), which %s holds: clients split between them", others, d.VIP, d.Instance, o.node)})
	case d.Released:
		o.ev.Record(membership.Event{Reason: reasonSplitBrainHealed, Action: "Release",
			Note: fmt.Sprintf("%s released %s; the other host (MAC %s) keeps it, after %s of both", o.node, d.VIP, others, seconds(d.Lasted))})
	default:
		o.ev.Record(membership.Event{Reason: reasonSplitBrainHealed, Action: "Probe",
			Note: fmt.Sprintf("no other host answers for %s now; %s holds it alone, after %s of both", d.VIP, o.node, seconds(d.Lasted))})
	}
}

// died records a death of keepalived.
func (o *operatorEvents) died(status string, uptime, restartIn time.Duration) {
	if o == nil {
		return
	}
	o.ev.Record(membership.Event{Warning: true, Reason: reasonKeepalivedRestarted, Action: "Restart",
		Note: fmt.Sprintf("keepalived died (%s) after %s; restarting it in %s", status, uptime.Round(time.Millisecond), restartIn)})
}

// adverts records the adverts keepalived speaks with p, when they change.
func (o *operatorEvents) adverts(p *plan.Plan) {
	if o == nil {
		return
	}
	o.ev.Record(membership.Event{Reason: reasonAdvertInterval, Action: "Reload",
		Note: fmt.Sprintf("keepalived now speaks VRRPv%d every %s s: %s", p.VRRPVersion(), keepalived.AdvertInt(p.AdvertInterval()), advertsWhy(p.Config, p.AdvertInterval()))})
}

// checkEvents records the built-in check's changes, with the last probe's
// error, and passes everything on to the Recorder it wraps.
type checkEvents struct {
	check.Recorder
	o      *operatorEvents
	target func() string
	mu     sync.Mutex
	last   error
	// failed is set once the check failed: its first pass is news only
	// after a failure.
	failed bool
}

func (c *checkEvents) Probed(took time.Duration, err error) {
	c.mu.Lock()
	c.last = err
	c.mu.Unlock()
	c.Recorder.Probed(took, err)
}

func (c *checkEvents) Passing(passing bool) {
	c.mu.Lock()
	last, failed := c.last, c.failed
	c.failed = c.failed || !passing
	c.mu.Unlock()
	switch {
	case passing && !failed:
	case passing:
		c.o.ev.Record(membership.Event{Reason: reasonCheckPassing, Action: "Resume",
			Note: fmt.Sprintf("the check of %s (OPENSHIFT_HA_MONITOR_PORT) passes: %s may hold VIPs again", c.target(), c.o.node)})
	default:
		why := "no answer"
		if last != nil {
			why = last.Error()
		}
		c.o.ev.Record(membership.Event{Warning: true, Reason: reasonCheckFailing, Action: "GiveUp",
			Note: fmt.Sprintf("the check of %s (OPENSHIFT_HA_MONITOR_PORT) fails: %s; %s gives its VIPs up", c.target(), why, c.o.node)})
	}
	c.Recorder.Passing(passing)
}
