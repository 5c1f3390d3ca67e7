package metrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCheckMetrics: with Options.Check, /metrics serves the built-in
// check's state and probe durations by result; lint-clean.
func TestCheckMetrics(t *testing.T) {
	f := startFake(t, "two-master.json")
	o := testOptions(newProcess(f.pid), f.dump)
	o.DumpMaxAge = -1
	o.Check = NewCheckMetrics()
	s := newServer(t, o)

	scrape := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", http.NoBody))
		return rec.Body.String()
	}
	want := func(body string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(body, l+"\n") {
				t.Errorf("/metrics lacks %q", l)
			}
		}
	}

	want(scrape(),
		"ipfailover_check_up 0",
		`ipfailover_check_duration_seconds_count{result="success"} 0`,
		`ipfailover_check_duration_seconds_count{result="failure"} 0`)

	o.Check.Probed(300*time.Microsecond, nil)
	o.Check.Probed(400*time.Microsecond, nil)
	o.Check.Probed(100*time.Millisecond, errors.New("i/o timeout"))
	o.Check.Passing(true)
	want(scrape(),
		"ipfailover_check_up 1",
		`ipfailover_check_duration_seconds_bucket{result="success",le="0.0005"} 2`,
		`ipfailover_check_duration_seconds_count{result="success"} 2`,
		`ipfailover_check_duration_seconds_bucket{result="failure",le="0.05"} 0`,
		`ipfailover_check_duration_seconds_bucket{result="failure",le="0.1"} 1`,
		`ipfailover_check_duration_seconds_count{result="failure"} 1`)

	o.Check.Passing(false)
	want(scrape(), "ipfailover_check_up 0")

	problems, err := testutil.CollectAndLint(o.Check)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestNoCheckMetricsWithoutCheck: a script check, or none, has no
// ipfailover_check_* series.
func TestNoCheckMetricsWithoutCheck(t *testing.T) {
	f := startFake(t, "two-master.json")
	s := newServer(t, testOptions(newProcess(f.pid), f.dump))
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", http.NoBody))
	if strings.Contains(rec.Body.String(), "ipfailover_check_") {
		t.Error("ipfailover_check_* served without the built-in check")
	}
}
