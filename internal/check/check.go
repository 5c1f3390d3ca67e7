// Package check is ipfailover's built-in health check, the default one: a
// TCP connect to the node's own address on OPENSHIFT_HA_MONITOR_PORT. It
// runs in the program instead of as a keepalived vrrp_script (whose
// shortest interval is one second, and which forks a shell for every run),
// and hands its state to keepalived through a file that keepalived watches
// with inotify (track_file), so that a failed check reaches VRRP within
// milliseconds.
//
// Timing. The check probes every period (OPENSHIFT_HA_CHECK_INTERVAL,
// 150 ms unless set). While a result is in doubt, because a probe disagreed
// with the state or one has not answered within Retry, it probes every
// Retry instead, without waiting for the probe still out. Fall failures in
// a row make the check fail, Rise successes in a row make it pass. A probe
// that has not connected after Timeout fails: a refused connection, a
// dropped SYN (a hung service) and a closed listener are all failures.
//
// So a service that stops is noticed within period + (Fall-1) × Retry
// (270 ms at the defaults, 195 ms on average), a hung one within Timeout
// more. A service that loses one connection in ten at random starts a run
// of failures about 0.7 times a second, and one run in 10^(Fall-1) is Fall
// long: the check fails about once in five years (2 × 10^-6 in five
// minutes). While the service is healthy the check costs one connection
// per period. CHANGELOG.md ("The built-in check") has the measurements
// behind these numbers.
//
// The log has a line when the check starts failing (or has failed Fall
// times from the start) and when it passes again, and repeats the failure,
// with the latest error, every Remind while it lasts: a log read by its
// last lines still says why this node holds no VIPs.
package check

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ipfailover/ipfailover/internal/component"
)

// The check's timing, chosen from measurements (see the package comment).
const (
	// Retry is the probe interval while a result is in doubt.
	Retry = 15 * time.Millisecond
	// Timeout bounds one probe. Connecting to a local address takes well
	// under a millisecond; on this project's 2-core machine with 4 busy
	// loops it took 13 ms at the 99.9th percentile and 62 ms at worst.
	Timeout = 100 * time.Millisecond
	// Fall is how many failures in a row make the check fail. More than
	// Timeout/Retry + 1, the most probes that can be out at once, so that
	// a program that was not scheduled for a while cannot fail the check
	// with the timeouts of its own probes alone.
	Fall = 9
	// Rise is how many successes in a row make the check pass again.
	Rise = 3
	// Remind is how often a failing check says so again in the log.
	Remind = time.Minute
)

// Prober makes attempts to reach the service.
type Prober interface {
	// Probe starts an attempt. One that ends within the call (a local
	// connect, accepted or refused) returns a nil wait and its result;
	// otherwise wait blocks until the attempt ends, or ctx does, and
	// returns its result.
	Probe() (wait func(ctx context.Context) error, err error)
}

// Reporter hands the check's state to keepalived.
type Reporter interface {
	Report(passing bool) error
}

// Recorder receives what the check does, for metrics.
type Recorder interface {
	// Probed is called for every probe that ended, err nil for a success.
	Probed(took time.Duration, err error)
	// Passing is called when the check starts passing or failing, and
	// once when a check that fails from the start has failed Fall times in
	// a row: from the first call on, the check has decided.
	Passing(passing bool)
}

// Options configure a Checker.
type Options struct {
	// Prober reaches the service; its String, if any, names it in logs.
	Prober Prober
	// Setting, if set, names in the log lines the setting that points the
	// check at its service (OPENSHIFT_HA_MONITOR_PORT).
	Setting string
	// Reporter gets the state whenever it changes. The check starts
	// failing: the caller reports that before keepalived starts.
	Reporter Reporter
	// Period is the probe interval while the state is settled.
	Period time.Duration
	// Recorder, when set, gets every probe and state change.
	Recorder Recorder
	// Logger gets one line per state change, and one every Remind while
	// the check fails; nil discards.
	Logger *slog.Logger
}

// Checker runs the check.
type Checker struct {
	o     Options
	retry time.Duration
}

// New makes a Checker; Run starts it.
func New(o Options) *Checker {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Checker{o: o, retry: min(Retry, o.Period)}
}

type result struct {
	took time.Duration
	err  error
}

// state is what the probes have shown so far.
type state struct {
	// passing is the state keepalived was last told.
	passing bool
	// streak counts the results in a row that disagree with passing.
	streak int
	// decided is set once the check has passed, or failed Fall times in a
	// row; failing counts those failures until then.
	decided bool
	failing int
	// failedAt is when the check decided that it fails; zero while it
	// passes or has not decided.
	failedAt time.Time
	// lastErr is the latest failure, for the log.
	lastErr error
	// reportErr is set while reporting fails, so the log says it once.
	reportErr error
}

// Run probes until ctx ends and reports every change of the state. It
// returns nil once its probes have returned.
func (c *Checker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	results := make(chan result)
	var (
		s        state
		out      int       // probes not answered yet
		lastSent time.Time // when the latest probe started
	)
	timer := time.NewTimer(0)
	defer timer.Stop()
	// remind runs while the check fails, Remind after its latest line.
	remind := time.NewTimer(Remind)
	remind.Stop()
	defer remind.Stop()
	reminding := false
	record := func(r result) {
		c.record(&s, r)
		if failing := !s.failedAt.IsZero(); failing != reminding {
			if failing {
				remind.Reset(Remind)
			} else {
				remind.Stop()
			}
			reminding = failing
		}
	}
	// schedule sets the timer for the next probe: Retry after the latest
	// one while in doubt (a result disagreed, or a passing check waits for
	// an answer), else a period after it.
	schedule := func() {
		next := c.o.Period
		if s.streak > 0 || s.passing && out > 0 {
			next = c.retry
		}
		timer.Reset(time.Until(lastSent.Add(next)))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			lastSent = time.Now()
			wait, err := c.o.Prober.Probe()
			if wait == nil {
				record(result{took: time.Since(lastSent), err: err})
			} else {
				out++
				began := lastSent
				wg.Go(func() {
					pctx, done := context.WithDeadline(ctx, began.Add(Timeout))
					defer done()
					// A probe that panics (a bug) fails, and the
					// check goes on.
					err := component.Safe("the check's probe", func() error { return wait(pctx) })
					select {
					case results <- result{took: time.Since(began), err: err}:
					case <-ctx.Done():
					}
				})
			}
			schedule()
		case r := <-results:
			out--
			record(r)
			schedule()
		case <-remind.C:
			c.o.Logger.Warn("check fails: keepalived holds no VIPs on this node until it passes",
				c.logged("last_error", s.lastErr, "failing_for", time.Since(s.failedAt).Round(time.Second).String())...)
			remind.Reset(Remind)
		}
	}
}

// record counts one result and reports a change of state.
func (c *Checker) record(s *state, r result) {
	if c.o.Recorder != nil {
		c.o.Recorder.Probed(r.took, r.err)
	}
	ok := r.err == nil
	if !ok {
		s.lastErr = r.err
	}
	if !s.decided && !s.passing {
		// The check starts failing, as keepalived was told: the failures
		// that confirm it are a verdict too.
		s.failing++
		if ok {
			s.failing = 0
		}
		if s.failing >= Fall {
			s.decided, s.failedAt = true, time.Now()
			if c.o.Recorder != nil {
				c.o.Recorder.Passing(false)
			}
			c.o.Logger.Warn("check fails from the start: keepalived holds no VIPs on this node until it passes",
				c.logged("failures_in_a_row", Fall, "last_error", s.lastErr)...)
		}
	}
	if ok == s.passing {
		s.streak = 0
		return
	}
	s.streak++
	if ok && s.streak < Rise || !ok && s.streak < Fall {
		return
	}
	if err := c.o.Reporter.Report(ok); err != nil {
		// The streak stays: the next result that agrees tries again.
		if s.reportErr == nil {
			c.o.Logger.Error("cannot tell keepalived the check's state; retrying with every probe", "passing", ok, "error", err)
		}
		s.reportErr = err
		return
	}
	s.reportErr = nil
	failedAt := s.failedAt
	s.passing, s.streak, s.decided, s.failedAt = ok, 0, true, time.Time{}
	if c.o.Recorder != nil {
		c.o.Recorder.Passing(ok)
	}
	switch {
	case ok && !failedAt.IsZero():
		c.o.Logger.Info("check passes", c.logged("successes_in_a_row", Rise, "failed_for", time.Since(failedAt).Round(time.Second).String())...)
	case ok:
		c.o.Logger.Info("check passes", c.logged("successes_in_a_row", Rise)...)
	default:
		s.failedAt = time.Now()
		c.o.Logger.Warn("check fails: keepalived releases this node's VIPs", c.logged("failures_in_a_row", Fall, "last_error", s.lastErr)...)
	}
}

// logged is a log line's attributes: the target and the setting that
// names it, then args.
func (c *Checker) logged(args ...any) []any {
	out := []any{"target", fmt.Sprint(c.o.Prober)}
	if c.o.Setting != "" {
		out = append(out, "setting", c.o.Setting)
	}
	return append(out, args...)
}
