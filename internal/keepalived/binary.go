package keepalived

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// DefaultBinary is where Debian and RHEL install keepalived, and where the
// image keeps it for the keepalived-operator.
const DefaultBinary = "/usr/sbin/keepalived"

// PIDFile is keepalived's own pid file: ipfailover never moves it, so that
// remove-failover and a restarted pod find a keepalived left running.
const PIDFile = "/run/keepalived.pid"

// FindBinary returns the keepalived to run: the first on PATH, else
// DefaultBinary.
func FindBinary() string {
	if p, err := exec.LookPath("keepalived"); err == nil {
		return p
	}
	return DefaultBinary
}

// Signum asks binary for the number of one of its signals by name (JSON,
// DATA, STATS, ...): `keepalived --signum=NAME`. The real-time ones, such as
// JSON (SIGRTMIN+2), depend on the C library keepalived was built with.
func Signum(ctx context.Context, binary, name string) (syscall.Signal, error) {
	out, err := exec.CommandContext(ctx, binary, "--signum="+name).Output()
	if err != nil {
		return 0, fmt.Errorf("asking %s --signum=%s: %w", binary, name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n <= 0 || n > 64 {
		return 0, fmt.Errorf("%s --signum=%s printed %q, want a signal number", binary, name, out)
	}
	return syscall.Signal(n), nil
}
