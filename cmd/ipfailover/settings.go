package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/host"
	"github.com/ipfailover/ipfailover/internal/plan"
)

// loadConfig reads every setting: the environment, and KEEPALIVED_OPTIONS
// from /etc/sysconfig/keepalived (a file that does not exist counts as
// empty), and validates them.
func loadConfig() (*config.Config, error) {
	raw, err := config.FromEnv()
	if err != nil {
		return nil, &plan.ConfigError{Err: err}
	}
	sysconfig, err := os.ReadFile(config.SysconfigPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", config.SysconfigPath, err)
	}
	raw.Sysconfig = string(sysconfig)
	cfg, err := config.Parse(raw)
	if err != nil {
		return nil, &plan.ConfigError{Err: err}
	}
	return cfg, nil
}

// planWith reads the settings and plans for the node nl looks at, with
// fleet as what the other pods publish (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods).
func planWith(nl *host.Netlink, fleet plan.Fleet) (*plan.Plan, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	return plan.New(cfg, nl, fleet)
}

// planHere plans for this network namespace; the caller closes the
// Netlink it returns.
func planHere() (*host.Netlink, *plan.Plan, error) {
	nl, err := host.NewNetlink()
	if err != nil {
		return nil, nil, fmt.Errorf("opening netlink: %w", err)
	}
	p, err := planWith(nl, plan.Fleet{})
	if err != nil {
		nl.Close()
		return nil, nil, err
	}
	return nl, p, nil
}
