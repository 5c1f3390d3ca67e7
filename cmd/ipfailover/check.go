package main

import (
	"fmt"
	"log/slog"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/check"
	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/internal/metrics"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// portCheck is the built-in check of OPENSHIFT_HA_MONITOR_PORT, which this
// program runs and keepalived follows through keepalived.CheckFile.
type portCheck struct {
	checker *check.Checker
	tcp     *check.TCP
	metrics *metrics.CheckMetrics
}

// newPortCheck prepares the built-in check when p uses it (nil otherwise)
// and tells keepalived, before it starts, that the check fails until the
// first probes pass.
func newPortCheck(p *plan.Plan, log *slog.Logger, events *operatorEvents) (*portCheck, error) {
	cfg := p.Config
	if cfg.Check != config.CheckPort {
		return nil, nil
	}
	file, err := check.NewFile(keepalived.CheckFile)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	c := &portCheck{tcp: check.NewTCP(cfg.CheckTarget(p.Node)), metrics: metrics.NewCheckMetrics()}
	var rec check.Recorder = c.metrics
	if events != nil {
		rec = &checkEvents{Recorder: c.metrics, o: events, target: c.tcp.String}
	}
	c.checker = check.New(check.Options{
		Prober: c.tcp, Setting: "OPENSHIFT_HA_MONITOR_PORT", Reporter: file, Period: cfg.CheckInterval,
		Recorder: rec, Logger: log,
	})
	return c, nil
}

// replan points the check at the node's address in a new plan.
func (c *portCheck) replan(p *plan.Plan) {
	if c != nil {
		c.tcp.Retarget(p.Config.CheckTarget(p.Node))
	}
}

// metricsOrNil is the check's series for metrics.Options.
func (c *portCheck) metricsOrNil() *metrics.CheckMetrics {
	if c == nil {
		return nil
	}
	return c.metrics
}
