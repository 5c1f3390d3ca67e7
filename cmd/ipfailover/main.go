// Command ipfailover is the entrypoint of the keepalived IP failover
// image: it turns OPENSHIFT_HA_* settings into a supervised keepalived.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/ipfailover/ipfailover/internal/plan"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: ipfailover [command]

commands:
  run              configure the host and supervise keepalived (the default)
  render           print the keepalived.conf this node would run, change nothing
  peers            print the unicast peers and why each pod of the workload is in or out
  status           print every VIP's holders and every pod's state, read from each pod
                   (exit 1 when a VIP is held twice or by none, or a pod is amiss)
  remove-failover  stop keepalived, remove the firewall rule, release the VIPs
  vr-ids NAME      print the router ids of an OpenShift on-prem IPI cluster
  version          print the version

Settings come from OPENSHIFT_HA_* variables; see docs/configuration.md.
`

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	os.Exit(exitCode(log, dispatch(log, os.Args[1:])))
}

func dispatch(log *slog.Logger, args []string) error {
	cmd := "run"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		log.Info("starting", "version", version, "pid", os.Getpid())
		return run(ctx, log, hup)
	case "render":
		return render(context.Background(), os.Stdout)
	case "peers":
		return peers(context.Background(), os.Stdout)
	case "status":
		return status(context.Background(), os.Stdout)
	case "remove-failover":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return removeFailover(ctx, os.Stdout)
	case "vr-ids":
		if len(args) != 1 {
			return &plan.ConfigError{Err: errors.New("usage: ipfailover vr-ids CLUSTER_NAME")}
		}
		return vrIDs(os.Stdout, args[0])
	case "version":
		fmt.Printf("ipfailover %s (%s)\n", version, runtime.Version())
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return &plan.ConfigError{Err: fmt.Errorf("unknown command %q\n%s", cmd, usage)}
}

// exitCode is 0 on success, 2 for bad configuration, 1 otherwise.
func exitCode(log *slog.Logger, err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUnhealthy):
		// status said what is amiss.
		return 1
	case plan.IsConfigError(err):
		fmt.Fprintf(os.Stderr, "ipfailover: invalid configuration:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return 2
	default:
		log.Error("failed", "error", err)
		return 1
	}
}
