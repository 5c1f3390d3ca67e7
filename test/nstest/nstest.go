// Package nstest makes throwaway network namespaces for tests that run as
// root: the real ip, keepalived, iptables and netlink get a namespace of
// their own, and the host is left alone.
package nstest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// New makes a network namespace named prefix-<8 hex digits> and deletes it
// when the test ends. It skips the test when not root.
func New(tb testing.TB, prefix string) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to make a network namespace")
	}
	ns := fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
	run(tb, "ip", "netns", "add", ns)
	tb.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			tb.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	return ns
}

// IP runs `ip -n ns args...` and fails the test with ip's output when it fails.
func IP(tb testing.TB, ns string, args ...string) {
	tb.Helper()
	run(tb, append([]string{"ip", "-n", ns}, args...)...)
}

// Veth adds the veth pair iface–peer in ns and sets both ends up, so iface
// has carrier.
func Veth(tb testing.TB, ns, iface, peer string) {
	tb.Helper()
	IP(tb, ns, "link", "add", iface, "type", "veth", "peer", "name", peer)
	IP(tb, ns, "link", "set", iface, "up")
	IP(tb, ns, "link", "set", peer, "up")
}

func run(tb testing.TB, argv ...string) {
	tb.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}
