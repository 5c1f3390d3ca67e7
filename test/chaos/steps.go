package chaos

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/ipfailover/ipfailover/test/lab"
)

// The fault steps the lab and the cluster share: both are built on the
// lab's nodes, bridge and segment.

// hold injects a fault, keeps it for length and undoes it. The undoing
// runs even when ctx ends meanwhile (with a context that is not
// cancelled), so nothing the nemesis did is left behind; the error of an
// interrupted wait comes after the undoing's.
func hold(ctx context.Context, length time.Duration, inject, undo func(context.Context) error) error {
	if err := inject(ctx); err != nil {
		return err
	}
	serr := sleep(ctx, length)
	if err := undo(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	return serr
}

// partition drops the VRRP deaf hears from peer, and the VRRP peer hears
// from deaf when both is set, for length.
func partition(ctx context.Context, deaf, peer *lab.Node, both bool, length time.Duration) error {
	pairs := [][2]*lab.Node{{deaf, peer}}
	if both {
		pairs = append(pairs, [2]*lab.Node{peer, deaf})
	}
	return hold(ctx, length, func(ctx context.Context) error {
		for _, p := range pairs {
			if err := p[0].DropVRRPFrom(ctx, p[1]); err != nil {
				return err
			}
		}
		return nil
	}, func(ctx context.Context) error {
		for _, p := range pairs {
			if err := p[0].AllowVRRPFrom(ctx, p[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// impairSegment loses, delays and reorders what c's segment carries, as f
// says, for f's length.
func impairSegment(ctx context.Context, c *lab.Cluster, f Fault) error {
	var imp *lab.Impaired
	return hold(ctx, f.Length, func(ctx context.Context) error {
		var err error
		imp, err = c.Impair(ctx, lab.Impairment{Loss: f.Loss, Delay: f.Delay, Jitter: f.Jitter, Seed: f.seed()})
		return err
	}, func(ctx context.Context) error { return imp.Restore(ctx) })
}

// addressStorm stops n's ipfailover, the process pid (SIGSTOP; keepalived
// runs on), adds and removes lab.StormAddrs addresses on n's interface, and
// resumes it (SIGCONT) length after the stop, or at once when the storm
// failed or ctx ended. The storm's work runs in g, the node's, where the
// target has one (lab.Node.AddressStorm).
func addressStorm(ctx context.Context, n *lab.Node, g *lab.CPUGroup, pid int, length time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP to ipfailover (pid %d) on %s: %w", pid, n.Name, err)
	}
	stopped := time.Now()
	err := n.AddressStorm(ctx, lab.StormAddrs, g)
	if err == nil {
		err = sleep(ctx, length-time.Since(stopped))
	}
	if cerr := syscall.Kill(pid, syscall.SIGCONT); cerr != nil {
		err = errors.Join(err, fmt.Errorf("SIGCONT to ipfailover (pid %d) on %s: %w", pid, n.Name, cerr))
	}
	return err
}

// stormAfterlife is how long the stormed ipfailover must be seen running
// after its resume: the time it takes to find its subscription gone and
// make it again, and more.
const stormAfterlife = 3 * time.Second

// outlives polls, for stormAfterlife, that alive holds: the stormed
// ipfailover runs on, the same process.
func outlives(ctx context.Context, alive func() error) error {
	until := time.Now().Add(stormAfterlife)
	for time.Now().Before(until) {
		if err := alive(); err != nil {
			return err
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return alive()
}

// ipfailoverCPURequest is the CPU request of deploy/'s ipfailover
// container, in millicores.
const ipfailoverCPURequest = 250

// programCPU is the CPU share of a program of a node's own (the
// checked service), in millicores: a process's default weight.
const programCPU = 1000

// harnessMachines is the CPU share of the harness in the lab's group, in
// machines (a node's share): enough that a node's burner does not hold off
// the client or the segment's delay queue (at 4, 80 % of a CPU against a
// saturated node), little enough that a busy harness does not hold off
// the nodes. At the largest share there is (128 machines) a harness busy
// with a storm's client load holds a starved node's ipfailover, runnable,
// off the CPU for longer than the fast adverts' master-down interval: the
// scheduler gives a group its turn in proportion to its weight.
const harnessMachines = 4

// starveCPURequest is the CPU request of a cpu-starve fault's burner, in
// millicores: the rest of a node with this machine's cores.
func starveCPURequest() int { return runtime.NumCPU()*1000 - ipfailoverCPURequest }

// starvedMachineCores is how many of this computer's cores a cluster
// machine has while a cpu-starve fault saturates it: every core but one
// (one on a computer of one or two), the rest left to the other machines
// and the harness.
func starvedMachineCores() int { return max(1, runtime.NumCPU()-1) }

// ranThrough checks that a starved node's ipfailover (pid) and keepalived
// (ka, its processes before the fault) ran through the fault: now lists
// keepalived's processes after it, or fails when ipfailover is gone.
func ranThrough(node string, pid int, ka []lab.Proc, now func() ([]lab.Proc, error)) error {
	after, err := now()
	if err != nil {
		return err
	}
	var before, still []int
	for _, q := range ka {
		before = append(before, q.Pid)
	}
	for _, q := range after {
		still = append(still, q.Pid)
	}
	slices.Sort(before)
	slices.Sort(still)
	if !slices.Equal(before, still) {
		return fmt.Errorf("keepalived on %s did not run through the starvation: pids %v before, %v after (ipfailover pid %d)", node, before, still, pid)
	}
	return nil
}
