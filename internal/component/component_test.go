package component

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStopOrder: components stop in the reverse of their start order, each
// finished before the one before it is asked.
func TestStopOrder(t *testing.T) {
	g := New(nil, nil)
	var mu sync.Mutex
	var events []string
	record := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	for _, name := range []string{"reaper", "server", "guard"} {
		g.Go(name, Essential, func(ctx context.Context) error {
			<-ctx.Done()
			record("asked " + name)
			time.Sleep(10 * time.Millisecond)
			record("done " + name)
			return nil
		})
	}
	g.Stop()
	want := "asked guard,done guard,asked server,done server,asked reaper,done reaper"
	if got := strings.Join(events, ","); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
	g.Stop() // twice is fine
	g.Go("late", Essential, func(context.Context) error { t.Error("started after Stop"); return nil })
}

// TestFailures: an essential component's error, early return or panic
// reaches fatal once each; an auxiliary one's marks it down and nothing
// else.
func TestFailures(t *testing.T) {
	fatal := make(chan error, 10)
	g := New(nil, func(err error) { fatal <- err })
	defer g.Stop()
	g.Go("fails", Essential, func(context.Context) error { return errors.New("listening: address in use") })
	g.Go("returns", Essential, func(context.Context) error { return nil })
	g.Go("panics", Essential, func(context.Context) error {
		var m map[string]int
		m["x"]++ // a nil map: panics
		return nil
	})
	g.Go("guard", Auxiliary, func(context.Context) error { panic("bad packet") })
	g.Go("fine", Auxiliary, func(ctx context.Context) error { <-ctx.Done(); return nil })

	got := map[string]string{}
	for range 3 {
		select {
		case err := <-fatal:
			name, _, _ := strings.Cut(err.Error(), ":")
			got[name] = err.Error()
		case <-time.After(10 * time.Second):
			t.Fatalf("fatal called %d times, want 3", len(got))
		}
	}
	for name, want := range map[string]string{
		"fails":   "address in use",
		"returns": "returned before it was asked to stop",
		"panics":  "panicked: assignment to entry in nil map",
	} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s: fatal error %q, want it to contain %q", name, got[name], want)
		}
	}
	if err := g.Failed(); err == nil || !strings.HasPrefix(err.Error(), "fails: ") && !strings.HasPrefix(err.Error(), "returns: ") && !strings.HasPrefix(err.Error(), "panics: ") {
		t.Errorf("Failed() = %v, want the first essential failure, named", err)
	}
	waitDown(t, g, "guard")
	select {
	case err := <-fatal:
		t.Errorf("fatal called for an auxiliary component: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	for _, h := range g.Health() {
		switch h.Name {
		case "fine":
			if !h.Up || h.Failures != 0 {
				t.Errorf("fine: %+v, want up", h)
			}
		case "guard":
			if h.Up || h.Failures != 1 || !strings.Contains(h.Err.Error(), "bad packet") {
				t.Errorf("guard: %+v, want down with the panic", h)
			}
		}
	}
}

func waitDown(t *testing.T, g *Group, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, h := range g.Health() {
			if h.Name == name && !h.Up {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s not down", name)
}

// TestStoppedIsNoFailure: a component that returns an error because it was
// asked to stop has not failed.
func TestStoppedIsNoFailure(t *testing.T) {
	g := New(nil, func(err error) { t.Errorf("fatal: %v", err) })
	g.Go("server", Essential, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	g.Stop()
	if err := g.Failed(); err != nil {
		t.Errorf("Failed() = %v after a stop", err)
	}
	if h := g.Health()[0]; !h.Up {
		t.Errorf("after Stop: %+v, want up", h)
	}
}

func TestSetHealth(t *testing.T) {
	g := New(nil, nil)
	defer g.Stop()
	g.Go("watch", Auxiliary, func(ctx context.Context) error { <-ctx.Done(); return nil })
	g.SetHealth("watch", errors.New("cannot subscribe"))
	g.SetHealth("watch", errors.New("still cannot")) // one failure, not two
	if h := g.Health()[0]; h.Up || h.Failures != 1 || h.Err.Error() != "still cannot" {
		t.Errorf("down: %+v", h)
	}
	g.SetHealth("watch", nil)
	if h := g.Health()[0]; !h.Up || h.Failures != 1 {
		t.Errorf("up again: %+v", h)
	}
	g.SetHealth("nosuch", errors.New("x"))
}
