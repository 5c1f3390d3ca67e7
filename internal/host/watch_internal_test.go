package host

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/ipfailover/ipfailover/test/nstest"
)

// TestAddrSocketOverflow overflows a real notification socket twice in a
// row: a reader that falls behind a storm of address changes gets
// errOverflow, and the same socket goes on reporting changes afterwards.
func TestAddrSocketOverflow(t *testing.T) {
	name := nstest.New(t, "ipf-watch")
	nstest.Veth(t, name, "ipf0", "ipf0p")
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	// The smallest queue the kernel grants: a few dozen notifications.
	s, err := openAddrSocket(ns, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := unixSetRcvbuf(s, 1); err != nil {
		t.Fatal(err)
	}
	// The kernel reports an overflow once per congestion, which ends when
	// the reader has emptied the queue, as the watch does.
	for round := 1; round <= 2; round++ {
		storm(t, name, "ipf0", 500)
		if err := readUntil(s, func(_ []int, err error) bool { return errors.Is(err, errOverflow) }); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		drain(t, s)
	}
	// One change must come through.
	nstest.IP(t, name, "addr", "add", "192.0.2.200/32", "dev", "ipf0")
	index := linkIndex(t, name, "ipf0")
	if err := readUntil(s, func(links []int, err error) bool {
		return err == nil && len(links) == 1 && links[0] == index
	}); err != nil {
		t.Fatalf("after two overflows: %v", err)
	}
}

func unixSetRcvbuf(s *addrSocket, n int) error {
	var serr error
	err := s.rc.Control(func(fd uintptr) { serr = setRcvbuf(int(fd), n) })
	return errors.Join(err, serr)
}

// storm adds n addresses to iface in ns and removes them, in one ip -batch.
func storm(t *testing.T, ns, iface string, n int) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "addr add 198.51.%d.%d/32 dev %s\n", 100+i/250, 1+i%250, iface)
	}
	for i := range n {
		fmt.Fprintf(&b, "addr del 198.51.%d.%d/32 dev %s\n", 100+i/250, 1+i%250, iface)
	}
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v: %s", err, out)
	}
}

// readUntil reads s until done says so, for at most 10 s.
func readUntil(s *addrSocket, done func([]int, error) bool) error {
	result := make(chan error, 1)
	go func() {
		for {
			links, _, err := s.read()
			if done(links, err) {
				result <- nil
				return
			}
			if err != nil && !errors.Is(err, errOverflow) {
				result <- err
				return
			}
		}
	}()
	select {
	case err := <-result:
		return err
	case <-time.After(10 * time.Second):
		s.close()
		return errors.New("not seen within 10 s")
	}
}

// drain reads what s has queued until it has been quiet for 200 ms.
func drain(t *testing.T, s *addrSocket) {
	t.Helper()
	for {
		if err := s.f.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.read(); err != nil && !errors.Is(err, errOverflow) {
			break
		}
	}
	if err := s.f.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
}

func linkIndex(t *testing.T, ns, iface string) int {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := NewNetlinkAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	ifi, err := nl.Interface(iface)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.Index
}

// fakeSource is an addrSource that replays a script of reads and then
// blocks until closed.
type fakeSource struct {
	mu     sync.Mutex
	script []fakeRead
	closed chan struct{}
	once   sync.Once
}

type fakeRead struct {
	links []int
	err   error
}

func newFakeSource(script ...fakeRead) *fakeSource {
	return &fakeSource{script: script, closed: make(chan struct{})}
}

func (f *fakeSource) read() ([]int, bool, error) {
	f.mu.Lock()
	if len(f.script) > 0 {
		r := f.script[0]
		f.script = f.script[1:]
		f.mu.Unlock()
		return r.links, false, r.err
	}
	f.mu.Unlock()
	<-f.closed
	return nil, false, errors.New("closed")
}

func (f *fakeSource) close() { f.once.Do(func() { close(f.closed) }) }

func (f *fakeSource) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.script)
}

// TestWatchOutlivesItsSources ends the subscription twice in a row (the
// kernel dropping notifications twice, then the socket failing twice):
// the watch reports each loss with a value, opens a new socket after each
// failure, goes on reporting changes, and returns when the context ends.
func TestWatchOutlivesItsSources(t *testing.T) {
	socketErr := errors.New("recvfrom: bad file descriptor")
	sources := []*fakeSource{
		newFakeSource(fakeRead{err: errOverflow}, fakeRead{err: errOverflow}, fakeRead{err: socketErr}),
		newFakeSource(fakeRead{err: socketErr}),
		newFakeSource(fakeRead{links: []int{7}}, fakeRead{links: []int{3}}),
	}
	var opened []*fakeSource
	openErr := true
	var mu sync.Mutex
	counts := &watchCounts{}
	w := addrWatch{
		open: func() (addrSource, error) {
			mu.Lock()
			defer mu.Unlock()
			// One failed open between the second and third source.
			if len(opened) == 2 && openErr {
				openErr = false
				return nil, errors.New("socket: too many open files")
			}
			if len(opened) == len(sources) {
				return nil, errors.New("no more sources")
			}
			s := sources[len(opened)]
			opened = append(opened, s)
			return s, nil
		},
		delay:  time.Millisecond,
		index:  3,
		counts: counts,
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, changed)
	}()
	// Values: each subscription (3), each overflow (2), the change on link
	// 3 (the one on link 7 is another interface's). They coalesce, so
	// count until the last source has been read through.
	deadline := time.After(10 * time.Second)
	for {
		mu.Lock()
		n := len(opened)
		mu.Unlock()
		last := sources[2].left()
		if n == 3 && last == 0 {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("opened %d sources, want 3", n)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end with its context")
	}
	if got := counts.overflows.Load(); got != 2 {
		t.Errorf("overflows = %d, want 2", got)
	}
	// Two failed sources and one failed open.
	if got := counts.reopens.Load(); got != 3 {
		t.Errorf("reopens = %d, want 3", got)
	}
	for i, s := range sources {
		select {
		case <-s.closed:
		default:
			t.Errorf("source %d was not closed", i)
		}
	}
}

// TestWatchSignalsLoss checks that each overflow gets its own value: the
// reader drains between them.
func TestWatchSignalsLoss(t *testing.T) {
	step := make(chan fakeRead)
	src := &stepSource{step: step, closed: make(chan struct{})}
	w := addrWatch{
		open:   func() (addrSource, error) { return src, nil },
		delay:  time.Millisecond,
		index:  anyLink,
		counts: &watchCounts{},
	}
	ctx, cancel := context.WithCancel(t.Context())
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, changed)
	}()
	expect := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no value", what)
		}
	}
	expect("subscribed")
	for i := range 2 {
		step <- fakeRead{err: errOverflow}
		expect(fmt.Sprintf("overflow %d", i+1))
	}
	step <- fakeRead{links: []int{12}}
	expect("a change after two overflows")
	cancel()
	<-done
}

type stepSource struct {
	step   chan fakeRead
	closed chan struct{}
	once   sync.Once
}

func (s *stepSource) read() ([]int, bool, error) {
	select {
	case r := <-s.step:
		return r.links, false, r.err
	case <-s.closed:
		return nil, false, errors.New("closed")
	}
}

func (s *stepSource) close() { s.once.Do(func() { close(s.closed) }) }

// FuzzParseAddrMessages: no input panics, and the indexes found come from
// messages that fit in the input.
func FuzzParseAddrMessages(f *testing.F) {
	// RTM_NEWADDR for link 2 (header 16 bytes, ifaddrmsg 8).
	msg := []byte{24, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 32, 0, 0, 2, 0, 0, 0}
	f.Add(msg)
	f.Add(append(append([]byte{}, msg...), msg...))
	f.Add(msg[:20])
	f.Add([]byte{255, 255, 255, 255, 20, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		links, _ := parseAddrMessages(b)
		if len(links) > len(b)/24 {
			t.Fatalf("%d links from %d bytes", len(links), len(b))
		}
	})
}

func TestParseAddrMessages(t *testing.T) {
	newAddr := []byte{24, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 32, 0, 0, 5, 0, 0, 0}
	delAddr := []byte{24, 0, 0, 0, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 32, 0, 0, 9, 0, 0, 0}
	overrun := []byte{16, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, tc := range []struct {
		name  string
		in    []byte
		links []int
		ok    bool
	}{
		{"one", newAddr, []int{5}, true},
		{"two", append(append([]byte{}, newAddr...), delAddr...), []int{5, 9}, true},
		{"truncated", newAddr[:20], nil, false},
		{"short ifaddrmsg", append([]byte{20, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 2, 3, 4), nil, false},
		{"overrun", overrun, nil, false},
		{"empty", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links, ok := parseAddrMessages(tc.in)
			if fmt.Sprint(links) != fmt.Sprint(tc.links) || ok != tc.ok {
				t.Errorf("parseAddrMessages = %v, %v; want %v, %v", links, ok, tc.links, tc.ok)
			}
		})
	}
}
