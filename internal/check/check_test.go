package check

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// service is a fake monitored service: what each probe meets.
type service struct {
	mu   sync.Mutex
	mode mode
	rng  *rand.Rand
	// next, when above 0, is how many probes meet failNext before mode
	// applies again.
	next     int
	failNext mode
	probes   int
	out      int
	maxOut   int
}

type mode int

const (
	up      mode = iota
	refused      // nothing listens: the connect fails at once
	hung         // SYNs dropped: the connect waits until its timeout
	flaky        // one connect in ten refused or dropped, at random
)

var errRefused = errors.New("connect: connection refused")

func (s *service) set(m mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// String names the service in the checker's log lines (without it, fmt
// would read the fields the probes change).
func (s *service) String() string { return "the test service" }

func (s *service) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probes
}

func (s *service) Probe() (func(ctx context.Context) error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes++
	m := s.mode
	if s.next > 0 {
		s.next--
		m = s.failNext
	}
	if m == flaky {
		switch s.rng.IntN(20) {
		case 0:
			m = refused
		case 1:
			m = hung
		default:
			m = up
		}
	}
	switch m {
	case refused:
		return nil, errRefused
	case hung:
		s.out++
		s.maxOut = max(s.maxOut, s.out)
		return func(ctx context.Context) error {
			<-ctx.Done()
			s.mu.Lock()
			s.out--
			s.mu.Unlock()
			return ctx.Err()
		}, nil
	}
	return nil, nil
}

// reports records what keepalived was told, and when.
type reports struct {
	mu   sync.Mutex
	fail int // fail the next calls
	got  []report
}

type report struct {
	at      time.Time
	passing bool
}

func (r *reports) Report(passing bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail > 0 {
		r.fail--
		return errors.New("disk full")
	}
	r.got = append(r.got, report{time.Now(), passing})
	return nil
}

func (r *reports) all() []report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]report(nil), r.got...)
}

// last is the latest report, and whether there was one.
func (r *reports) last() (report, bool) {
	all := r.all()
	if len(all) == 0 {
		return report{}, false
	}
	return all[len(all)-1], true
}

// run starts a Checker of period on svc in the bubble and returns what it
// reports; the checker stops when the test ends.
func run(t *testing.T, svc *service, period time.Duration) *reports {
	t.Helper()
	rep := &reports{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		if err := New(Options{Prober: svc, Reporter: rep, Period: period}).Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return rep
}

// passAfterStart waits until the check passes and returns when it did.
func passAfterStart(t *testing.T, rep *reports, start time.Time) time.Duration {
	t.Helper()
	time.Sleep(time.Second)
	r, ok := rep.last()
	if !ok || !r.passing {
		t.Fatalf("check not passing a second after the start: %v", rep.all())
	}
	return r.at.Sub(start)
}

func TestStartsFailingAndPassesAfterRise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		rep := run(t, &service{}, 100*time.Millisecond)
		synctest.Wait()
		if got := rep.all(); len(got) != 0 {
			t.Fatalf("reported %v before any probe passed: the check starts failing", got)
		}
		took := passAfterStart(t, rep, start)
		if want := (Rise - 1) * Retry; took != want {
			t.Errorf("passed %s after the start, want %s (Rise probes, Retry apart)", took, want)
		}
	})
}

// TestStopIsNoticed: a service that stops (refused) or hangs (dropped SYNs)
// at any phase of the period fails the check Fall probes later, Retry
// apart, plus Timeout when probes hang; never sooner, never later.
func TestStopIsNoticed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		period time.Duration
		how    mode
		extra  time.Duration
	}{
		{"refused", 100 * time.Millisecond, refused, 0},
		{"hung", 100 * time.Millisecond, hung, Timeout},
		{"refused, period set to 2 s", 2 * time.Second, refused, 0},
		{"hung, period set to 2 s", 2 * time.Second, hung, Timeout},
	} {
		for _, phase := range []time.Duration{0, time.Millisecond, tt.period / 3, tt.period / 2, tt.period - time.Millisecond} {
			t.Run(fmt.Sprintf("%s/phase %s", tt.name, phase), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					svc := &service{}
					start := time.Now()
					rep := run(t, svc, tt.period)
					passAfterStart(t, rep, start)
					time.Sleep(phase)
					stopped := time.Now()
					svc.set(tt.how)
					time.Sleep(tt.period + time.Second)

					r, _ := rep.last()
					if r.passing {
						t.Fatalf("still passing %s after the service stopped: %v", time.Since(stopped), rep.all())
					}
					took := r.at.Sub(stopped)
					lo, hi := (Fall-1)*Retry+tt.extra, tt.period+(Fall-1)*Retry+tt.extra
					if took <= lo || took > hi {
						t.Errorf("failed %s after the stop, want in (%s, %s]", took, lo, hi)
					}
					svc.mu.Lock()
					maxOut := svc.maxOut
					svc.mu.Unlock()
					if limit := int(Timeout/Retry) + 1; maxOut > limit {
						t.Errorf("%d probes out at once, want at most %d", maxOut, limit)
					}
				})
			})
		}
	}
}

// TestFewFailuresKeepPassing: up to Fall-1 failures in a row, refused or
// hung, do not fail the check.
func TestFewFailuresKeepPassing(t *testing.T) {
	for _, how := range []mode{refused, hung} {
		t.Run(how.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc := &service{}
				rep := run(t, svc, 100*time.Millisecond)
				passAfterStart(t, rep, time.Now())
				for range 3 {
					svc.mu.Lock()
					svc.next, svc.failNext = Fall-1, how
					svc.mu.Unlock()
					time.Sleep(time.Second)
				}
				if got := rep.all(); len(got) != 1 {
					t.Errorf("reports %v, want only the first pass", got)
				}
				svc.mu.Lock()
				next := svc.next
				svc.mu.Unlock()
				if next != 0 {
					t.Errorf("%d of the failures never met a probe", next)
				}
			})
		})
	}
}

// TestFlakyServiceKeepsPassing: a service that refuses or drops one
// connection in ten at random keeps passing for five minutes, in twenty
// runs of different randomness.
func TestFlakyServiceKeepsPassing(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc := &service{rng: rand.New(rand.NewPCG(seed, 1))}
				rep := run(t, svc, 100*time.Millisecond)
				passAfterStart(t, rep, time.Now())
				svc.set(flaky)
				before := svc.count()
				time.Sleep(5 * time.Minute)
				if got := rep.all(); len(got) != 1 {
					t.Errorf("the check changed state: %v", got)
				}
				// 10 steady probes a second, plus a few while in doubt.
				if n := svc.count() - before; n < 3000 || n > 6000 {
					t.Errorf("%d probes in 5 minutes, want 3000..6000", n)
				}
			})
		})
	}
}

// TestSteadyPeriod: settled, passing or failing, the check probes once a
// period; in doubt it does not wait for a probe that hangs.
func TestSteadyPeriod(t *testing.T) {
	for _, tt := range []struct {
		name string
		how  mode
	}{
		{"passing", up},
		{"failing, refused", refused},
		{"failing, hung", hung},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svc := &service{}
				rep := run(t, svc, 100*time.Millisecond)
				passAfterStart(t, rep, time.Now())
				svc.set(tt.how)
				time.Sleep(2 * time.Second) // settle
				before := svc.count()
				time.Sleep(10 * time.Second)
				if n := svc.count() - before; n < 99 || n > 101 {
					t.Errorf("%d probes in 10 s at a period of 100 ms", n)
				}
			})
		})
	}
}

func TestRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &service{}
		rep := run(t, svc, 100*time.Millisecond)
		passAfterStart(t, rep, time.Now())
		svc.set(refused)
		time.Sleep(time.Second)
		time.Sleep(30 * time.Millisecond) // another phase
		back := time.Now()
		svc.set(up)
		time.Sleep(time.Second)
		r, _ := rep.last()
		if !r.passing {
			t.Fatalf("not passing a second after the service came back: %v", rep.all())
		}
		took := r.at.Sub(back)
		if lo, hi := (Rise-1)*Retry, 100*time.Millisecond+(Rise-1)*Retry; took <= lo || took > hi {
			t.Errorf("passed %s after the service came back, want in (%s, %s]", took, lo, hi)
		}
	})
}

// TestReportRetried: a state keepalived could not be told is told with the
// next result that agrees.
func TestReportRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &service{}
		rep := &reports{fail: 2}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { _ = New(Options{Prober: svc, Reporter: rep, Period: 100 * time.Millisecond}).Run(ctx) }()
		time.Sleep(time.Second)
		got := rep.all()
		if len(got) != 1 || !got[0].passing {
			t.Fatalf("reports %v, want one pass", got)
		}
		// Failed at the third success (Rise) and the fourth, told at the fifth.
		if want := time.Unix(946684800, 0).Add((Rise + 1) * Retry); !got[0].at.Equal(want) {
			t.Errorf("told at %s, want %s", got[0].at.UTC(), want.UTC())
		}
		cancel()
		synctest.Wait()
	})
}

// TestRunReturnsWithItsProbes: Run returns when its context ends, also
// with probes hanging, and leaves no goroutine behind (synctest fails the
// test otherwise).
func TestRunReturnsWithItsProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &service{mode: hung}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			_ = New(Options{Prober: svc, Reporter: &reports{}, Period: 100 * time.Millisecond}).Run(ctx)
			close(done)
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		<-done
	})
}

func (m mode) String() string {
	return [...]string{"up", "refused", "hung", "flaky"}[m]
}

// recorder records the state changes a Recorder gets.
type recorder struct {
	mu      sync.Mutex
	passing []bool
}

func (r *recorder) Probed(time.Duration, error) {}

func (r *recorder) Passing(p bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passing = append(r.passing, p)
}

func (r *recorder) all() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.passing...)
}

// TestFailingFromTheStartDecides: a check that never passes tells the
// recorder so after Fall failures in a row (keepalived, told at the start,
// hears nothing new); one that passes decides by passing.
func TestFailingFromTheStartDecides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tt := range []struct {
			m    mode
			want string
		}{{refused, "[false]"}, {up, "[true]"}} {
			rec, rep := &recorder{}, &reports{}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() {
				_ = New(Options{Prober: &service{mode: tt.m}, Reporter: rep, Period: 100 * time.Millisecond, Recorder: rec}).Run(ctx)
				close(done)
			}()
			time.Sleep((Fall-1)*100*time.Millisecond - time.Millisecond) // Fall-1 probes: at 0, 100, ... ms
			synctest.Wait()
			if tt.m == refused && len(rec.all()) != 0 {
				t.Errorf("decided after %d failures: %v", Fall-1, rec.all())
			}
			time.Sleep(time.Second)
			if got := fmt.Sprint(rec.all()); got != tt.want {
				t.Errorf("mode %d: recorder got %s, want %s", tt.m, got, tt.want)
			}
			if tt.m == refused && len(rep.all()) != 0 {
				t.Errorf("keepalived was told %v: it knows the check fails", rep.all())
			}
			cancel()
			<-done
		}
	})
}

// panicky's probes wait for an answer and panic.
type panicky struct{}

func (panicky) Probe() (func(context.Context) error, error) {
	return func(context.Context) error { panic("a bug in the probe") }, nil
}

// TestPanickingProbeFails: a probe that panics is a failed probe: the
// check decides it fails, and Run goes on until its context ends.
func TestPanickingProbeFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- New(Options{Prober: panicky{}, Reporter: &reports{}, Period: 100 * time.Millisecond, Recorder: rec}).Run(ctx)
		}()
		time.Sleep(time.Second)
		if got := fmt.Sprint(rec.all()); got != "[false]" {
			t.Errorf("recorder got %s, want [false]", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// logLines records a Checker's log lines.
type logLines struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// since returns the lines logged at or after t, each as its time after t,
// its message and its attributes key=value.
func (l *logLines) since(t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Time.Before(t) {
			continue
		}
		line := fmt.Sprintf("%s %s", r.Time.Sub(t), r.Message)
		r.Attrs(func(a slog.Attr) bool {
			line += " " + a.String()
			return true
		})
		out = append(out, line)
	}
	return out
}

// TestFailureToldOnceAMinute: a failing check says so when it decides, then
// again every minute on the minute with the latest error and the setting,
// never more often; it says once that it passes, and then nothing.
func TestFailureToldOnceAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		svc := &service{mode: refused}
		logs := &logLines{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			_ = New(Options{Prober: svc, Setting: "OPENSHIFT_HA_MONITOR_PORT", Reporter: &reports{}, Period: 100 * time.Millisecond, Logger: slog.New(logs)}).Run(ctx)
			close(done)
		}()
		defer func() {
			cancel()
			<-done
		}()

		const attrs = "target=the test service setting=OPENSHIFT_HA_MONITOR_PORT"
		decided := (Fall - 1) * 100 * time.Millisecond // the Fall-th probe
		// Half a period off the probes, so that none runs as the service
		// comes back.
		time.Sleep(3*time.Minute + 30*time.Second + 50*time.Millisecond)
		want := []string{
			fmt.Sprintf("%s check fails from the start: keepalived holds no VIPs on this node until it passes %s failures_in_a_row=%d last_error=%v", decided, attrs, Fall, errRefused),
			fmt.Sprintf("%s check fails: keepalived holds no VIPs on this node until it passes %s last_error=%v failing_for=1m0s", decided+time.Minute, attrs, errRefused),
			fmt.Sprintf("%s check fails: keepalived holds no VIPs on this node until it passes %s last_error=%v failing_for=2m0s", decided+2*time.Minute, attrs, errRefused),
			fmt.Sprintf("%s check fails: keepalived holds no VIPs on this node until it passes %s last_error=%v failing_for=3m0s", decided+3*time.Minute, attrs, errRefused),
		}
		if diff := cmp.Diff(want, logs.since(start)); diff != "" {
			t.Fatalf("log while failing from the start (-want +got):\n%s", diff)
		}

		back := time.Now()
		svc.set(up)
		time.Sleep(3 * time.Minute)
		// The next period's probe sees it first, then Retry apart.
		passed := 50*time.Millisecond + (Rise-1)*Retry
		failedFor := back.Add(passed).Sub(start.Add(decided)).Round(time.Second)
		want = []string{fmt.Sprintf("%s check passes %s successes_in_a_row=%d failed_for=%s", passed, attrs, Rise, failedFor)}
		if diff := cmp.Diff(want, logs.since(back)); diff != "" {
			t.Errorf("log once passing (-want +got):\n%s", diff)
		}

		// A failure after a pass: the same pace from its first line.
		stopped := time.Now()
		svc.set(refused)
		time.Sleep(2*time.Minute + 30*time.Second)
		got := logs.since(stopped)
		if len(got) != 3 {
			t.Fatalf("log after the service stopped again: %d lines, want 3:\n%s", len(got), strings.Join(got, "\n"))
		}
		first, _, _ := strings.Cut(got[0], " ")
		at, err := time.ParseDuration(first)
		if err != nil {
			t.Fatal(err)
		}
		want = []string{
			fmt.Sprintf("%s check fails: keepalived releases this node's VIPs %s failures_in_a_row=%d last_error=%v", at, attrs, Fall, errRefused),
			fmt.Sprintf("%s check fails: keepalived holds no VIPs on this node until it passes %s last_error=%v failing_for=1m0s", at+time.Minute, attrs, errRefused),
			fmt.Sprintf("%s check fails: keepalived holds no VIPs on this node until it passes %s last_error=%v failing_for=2m0s", at+2*time.Minute, attrs, errRefused),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("log after the service stopped again (-want +got):\n%s", diff)
		}
	})
}

// TestShortFailureNotRepeated: a failure shorter than Remind has its two
// lines, fails and passes, and no other.
func TestShortFailureNotRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := &service{}
		logs := &logLines{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			_ = New(Options{Prober: svc, Reporter: &reports{}, Period: 100 * time.Millisecond, Logger: slog.New(logs)}).Run(ctx)
			close(done)
		}()
		defer func() {
			cancel()
			<-done
		}()
		time.Sleep(time.Second)
		from := time.Now()
		svc.set(refused)
		time.Sleep(Remind - time.Second)
		svc.set(up)
		time.Sleep(5 * Remind)
		var msgs []string
		for _, l := range logs.since(from) {
			_, rest, _ := strings.Cut(l, " ")
			msg, _, _ := strings.Cut(rest, " target=")
			msgs = append(msgs, msg)
		}
		want := []string{"check fails: keepalived releases this node's VIPs", "check passes"}
		if diff := cmp.Diff(want, msgs); diff != "" {
			t.Errorf("log of a failure shorter than %s (-want +got):\n%s", Remind, diff)
		}
	})
}
