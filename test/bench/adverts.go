package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/test/lab"
)

// The adverts rows: what VRRP costs each node of a settled three-node
// fleet with static unicast peers (every node in
// OPENSHIFT_HA_UNICAST_PEERS, so every master sends each advert to each
// other node) at the advert intervals in question, with a few instances
// and at the router-id ceiling.
const (
	// targetAdvertCPU is the bound on a node's CPU at 254
	// instances (ipfailover and keepalived's processes), in percent of one
	// core.
	targetAdvertCPU = 5.0
	// fewVIPs are the VIPs of the four-instance rows.
	fewVIPs = "198.51.100.1-4"
)

// advertCase is one fleet of the adverts rows.
type advertCase struct {
	instances int
	// interval is OPENSHIFT_HA_ADVERT_INTERVAL, always set.
	interval string
}

// advertCases: the shipped interval as the baseline, the fast interval a
// fleet of that size runs (config.FastIntervalFor: 0.2 s for four
// instances, 0.26 s for 254), 0.2 s at 254 to show what the bound on the
// fleet's advert rate saves, and the fastest one measured.
var advertCases = []advertCase{
	{4, "1"}, {4, fastInterval(4)}, {4, "0.1"},
	{254, "1"}, {254, fastInterval(254)}, {254, "0.2"}, {254, "0.1"},
}

// fastInterval is the fast advert interval of a fleet of instances, as
// OPENSHIFT_HA_ADVERT_INTERVAL writes it.
func fastInterval(instances int) string {
	return strconv.FormatFloat(config.FastIntervalFor(instances).Seconds(), 'f', -1, 64)
}

// fleetFast says whether the case runs the fast interval a fleet of its
// size would pick by itself.
func (c advertCase) fleetFast() bool { return c.interval == fastInterval(c.instances) }

func (c advertCase) suffix() string {
	return fmt.Sprintf("%d instances at advert_int %s s, 3 nodes, unicast", c.instances, c.interval)
}

func (c advertCase) cpuRow() string    { return "adverts: CPU per node, " + c.suffix() }
func (c advertCase) packetRow() string { return "adverts: VRRP packets per node, " + c.suffix() }

func (c advertCase) vips() string {
	if c.instances == 4 {
		return fewVIPs
	}
	return scaleVIPs
}

// unicastPeers lists every node's IPv4 address, as
// OPENSHIFT_HA_UNICAST_PEERS.
func unicastPeers(nodes []*lab.Node) string {
	var peers []string
	for _, n := range nodes {
		peers = append(peers, n.Addr4.String())
	}
	return "OPENSHIFT_HA_UNICAST_PEERS=" + strings.Join(peers, ",")
}

// adverts measures each advert case on a fresh fleet: its CPU, memory and
// VRRP packets per node over CostFor, once the fleet settled.
func (r *runner) adverts(ctx context.Context) error {
	for _, c := range advertCases {
		if c.instances > 4 && !r.o.Scale {
			continue
		}
		began := time.Now()
		env := []string{
			"OPENSHIFT_HA_VIRTUAL_IPS=" + c.vips(),
			"OPENSHIFT_HA_VRRP_ID_OFFSET=0",
			"OPENSHIFT_HA_REPLICA_COUNT=3",
			fmt.Sprintf("OPENSHIFT_HA_MONITOR_PORT=%d", MonitorPort),
			unicastPeers(r.c.Nodes),
			"OPENSHIFT_HA_ADVERT_INTERVAL=" + c.interval,
		}
		ss, err := r.restFleet(ctx, env, VIPs(c.vips()))
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The other cases, and the bench's later phases, still
			// measure: the row says why it has no figures.
			r.note("adverts, %s: %v", c.suffix(), err)
			r.mu.Lock()
			r.failed[c.cpuRow()] = err.Error()
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		r.rest[c.cpuRow()] = ss
		r.mu.Unlock()
		r.o.Log.Info("adverts row done", "case", c.suffix(), "took", time.Since(began).Round(time.Millisecond))
	}
	return ctx.Err()
}

// restFleet starts a fleet, lets it settle and measures it at rest.
func (r *runner) restFleet(ctx context.Context, env []string, vips []netip.Addr) ([]restSample, error) {
	f, err := r.start(ctx, env, vips, "")
	if err != nil {
		return nil, err
	}
	cleanup := func() {}
	defer func() {
		r.stop(f)
		cleanup()
	}()
	// Let the start settle: backups hear their first adverts.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	ss, cleanup, err := r.atRest(ctx, f, r.o.CostFor)
	return ss, err
}

// advertRows are, per case, the packets and the CPU per node; the CPU of
// the 254-instance fleet at its own fast interval has the target
// on the worst node.
func (r *runner) advertRows() []Row {
	var rows []Row
	for _, c := range advertCases {
		ss, ok := r.rest[c.cpuRow()]
		if why, failed := r.failed[c.cpuRow()]; failed {
			rows = append(rows, Row{Name: c.cpuRow(), Unit: Percent, Note: "no figures: " + why})
		}
		if !ok {
			continue
		}
		rows = append(rows, packetRow(c.packetRow(), ss, r.o.CostFor))
		cpu := restCPURow(c.cpuRow(), ss, r.o.CostFor)
		if c.instances == 254 && c.fleetFast() {
			cpu.Check("worst", targetAdvertCPU)
		}
		rows = append(rows, cpu)
	}
	return rows
}
