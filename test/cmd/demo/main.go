// Command demo shows IP failover in about a minute: it builds the real
// ipfailover, starts it with the real keepalived on three nodes of a lab
// cluster (network, PID and mount namespaces), and narrates what happens
// when a node's service fails and when a pod is rolled, with timings
// measured on the kernel's addresses, and a split brain (VRRP blocked on a
// node) seen and healed. It exits non-zero when anything does
// not happen as expected, so it doubles as a smoke test.
//
// Usage, as root from the repository:
//
//	go run ./test/cmd/demo [-v]
//
// The program also runs, copied next to ipfailover, as each node's
// monitored web service ("demo serve"), which answers with the node's name.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ipfailover/ipfailover/test/lab"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(lab.ServeName(os.Args[2:]))
	}
	verbose := flag.Bool("v", false, "stream every node's output and the lab's steps")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: demo [-v]\n\nRuns ipfailover on a three-node lab cluster narrates two failovers and a split brain. Needs root.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Stdout, *verbose)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err == nil:
		return
	case interrupted:
		fmt.Fprintln(os.Stderr, "\ndemo: interrupted; everything it made is removed")
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "\ndemo: FAILED: %v\n", err)
		os.Exit(1)
	}
}
