package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/keepalived"
)

const (
	// faultRemind is how often instances that stay in FAULT are told again.
	faultRemind = time.Minute
	// faultLook is how often RemindFaults looks at keepalived's instances.
	// A dump younger than that (a readiness probe's, a scrape's) serves it.
	faultLook = 10 * time.Second
)

// RemindFaults tells in the log, once a minute while it lasts, which planned instances
// keepalived holds in FAULT and what ipfailover knows of the reason, and once when they have
// left FAULT, until ctx ends. keepalived logs the moment an instance enters FAULT, and its lines
// scroll away while the FAULT lasts; a FAULT shorter than a minute is left to them. A FAULT
// while the built-in check fails is the check's, which says so itself.
func (s *Server) RemindFaults(ctx context.Context) error {
	r := &faultReminder{
		instances:    s.faultyInstances,
		checkFailing: func() bool { return s.check != nil && s.check.Failing() },
		link: func(name string) (net.Flags, error) {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return 0, err
			}
			return ifi.Flags, nil
		},
		iface:  s.collector.iface,
		script: s.checkScript,
		log:    s.log,
	}
	r.run(ctx)
	return nil
}

// faultyInstances lists the planned instances keepalived holds in FAULT, from a dump younger
// than faultLook, and when the earliest of them entered it (zero when keepalived does not
// say).
func (s *Server) faultyInstances() (names []string, since time.Time, err error) {
	if err := alive(s.proc, s.keepalived); err != nil {
		return nil, time.Time{}, err
	}
	d, err := s.collector.dumper.getWithin(s.keepalived.PID(), faultLook)
	if err != nil {
		return nil, time.Time{}, err
	}
	planned := make(map[string]bool, len(s.collector.instances))
	for _, in := range s.collector.instances {
		planned[in.Name] = true
	}
	for _, in := range d.instances {
		if !planned[in.Data.Name] || in.Data.State != keepalived.StateFault {
			continue
		}
		names = append(names, in.Data.Name)
		if t := in.Data.LastTransition; t > 0 {
			sec, frac := math.Modf(t)
			at := time.Unix(int64(sec), int64(frac*1e9))
			if since.IsZero() || at.Before(since) {
				since = at
			}
		}
	}
	slices.Sort(names)
	return names, since, nil
}

// faultReminder is RemindFaults' loop, with its sources as functions.
type faultReminder struct {
	// instances lists the instances in FAULT and since when (zero: not known).
	instances func() ([]string, time.Time, error)
	// checkFailing says whether the built-in check fails.
	checkFailing func() bool
	// link returns the flags of an interface.
	link   func(name string) (net.Flags, error)
	iface  string
	script string // the check script keepalived runs, if any
	log    *slog.Logger
}

// run looks every faultLook and tells a FAULT every faultRemind after it was first seen, on
// the looks that fall on those times, until ctx ends.
func (r *faultReminder) run(ctx context.Context) {
	timer := time.NewTimer(faultLook)
	defer timer.Stop()
	var (
		seen, due time.Time // when the FAULT was first seen, and is told next
		told      []string  // the instances last told, nil until told
		since     time.Time // when keepalived says the FAULT began, if it does
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		names, at, err := r.instances()
		switch {
		case err != nil || len(names) > 0 && r.checkFailing():
			// Not known, or the check's FAULT, which it tells: the
			// reminder waits as it is.
		case len(names) == 0:
			if told != nil {
				r.log.Info("keepalived's instances left FAULT", "instances", strings.Join(told, ","),
					"failed_for", now.Sub(since).Round(time.Second).String())
			}
			seen, told = time.Time{}, nil
		case seen.IsZero():
			seen, due, since = now, now.Add(faultRemind), now
			if !at.IsZero() && at.Before(now) {
				since = at
			}
		case !now.Before(due):
			told = names
			r.log.Warn("keepalived holds instances in FAULT: this node takes none of their VIPs until they leave it",
				"instances", strings.Join(names, ","), "failing_for", now.Sub(since).Round(time.Second).String(),
				"cause", r.cause())
			for !due.After(now) {
				due = due.Add(faultRemind)
			}
		}
		next := faultLook
		if !seen.IsZero() && due.After(now) {
			next = min(next, due.Sub(now))
		}
		timer.Reset(next)
	}
}

// cause is what ipfailover knows of why keepalived holds instances in FAULT.
func (r *faultReminder) cause() string {
	flags, err := r.link(r.iface)
	switch {
	case err != nil:
		return fmt.Sprintf("interface %s: %v", r.iface, err)
	case flags&net.FlagUp == 0:
		return fmt.Sprintf("interface %s is down", r.iface)
	case flags&net.FlagRunning == 0:
		return fmt.Sprintf("interface %s has no carrier", r.iface)
	case r.script != "":
		return fmt.Sprintf("interface %s is up: the check script fails, or keepalived cannot run it (OPENSHIFT_HA_CHECK_SCRIPT=%s)", r.iface, r.script)
	}
	return fmt.Sprintf("interface %s is up: keepalived's lines as it entered FAULT say why", r.iface)
}

// checkScript is the check script keepalived runs, if the plan has one.
func checkScript(c *config.Config) string {
	if c.Check == config.CheckScript {
		return c.CheckScript
	}
	return ""
}
