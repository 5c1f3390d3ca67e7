// Package component runs the long-lived parts of ipfailover's run, each in
// a goroutine of its own, and is the one place their lifetimes are decided.
//
// A component is a function Run(ctx) error that works until its context
// ends and then returns. A Group starts components in the order the
// composition root calls Go, and Stop stops them in the reverse order,
// each one finished before the one started before it is asked to stop: a
// component may rely on everything started before it for its whole life.
// Nothing else in the program starts a goroutine that outlives the call
// that started it.
//
// A component that returns before it is asked to stop, with an error or
// without, or that panics, has failed. What follows depends on its role:
// an Essential component's failure ends the run (the Group's fatal
// function gets the error once, and the run hands its VIPs over and exits
// non-zero, so the pod restarts); an Auxiliary one is marked down, which
// /readyz and the ipfailover_component_up metric show within a scrape, and
// the run goes on without it. A running component may also report itself
// down and up again (SetHealth), for a failure it works around.
package component

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Role says what a component's failure does to the run.
type Role int

const (
	// Essential components end the run when they fail.
	Essential Role = iota
	// Auxiliary components are marked down when they fail; the run goes
	// on.
	Auxiliary
)

func (r Role) String() string {
	if r == Essential {
		return "essential"
	}
	return "auxiliary"
}

// Health is one component's state.
type Health struct {
	Name string
	Role Role
	// Up is false once the component failed, or while it reports itself
	// down.
	Up bool
	// Err is why it is down.
	Err error
	// Failures counts its failures and its reports of being down.
	Failures uint64
}

// Group is the running components of one run. Its zero value is not
// usable; make one with New.
type Group struct {
	log   *slog.Logger
	fatal func(error)

	mu      sync.Mutex
	comps   []*running
	byName  map[string]*running
	stopped bool
	// firstFatal is the first essential component's failure.
	firstFatal error
}

type running struct {
	health Health
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Group whose Essential components' failures are passed to
// fatal (at most one call per failure, from the failed component's
// goroutine).
func New(log *slog.Logger, fatal func(error)) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{log: log, fatal: fatal, byName: map[string]*running{}}
}

// Go starts run as the component name. Names are unique. It does nothing
// once Stop has been called.
func (g *Group) Go(name string, role Role, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{health: Health{Name: name, Role: role, Up: true}, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		cancel()
		return
	}
	if _, dup := g.byName[name]; dup {
		panic("component: two components named " + name)
	}
	g.comps = append(g.comps, r)
	g.byName[name] = r
	go func() {
		defer close(r.done)
		err := Safe(name, func() error { return run(ctx) })
		if ctx.Err() != nil {
			// Asked to stop: how it ended is its business.
			if err != nil && !errors.Is(err, context.Canceled) {
				g.log.Warn("component stopped with an error", "component", name, "error", err)
			}
			return
		}
		if err == nil {
			err = errors.New("it returned before it was asked to stop")
		}
		g.failed(r, err)
	}()
}

func (g *Group) failed(r *running, err error) {
	g.mu.Lock()
	r.health.Up, r.health.Err = false, err
	r.health.Failures++
	h := r.health
	if h.Role == Essential {
		err = fmt.Errorf("%s: %w", h.Name, err)
		if g.firstFatal == nil {
			g.firstFatal = err
		}
	}
	g.mu.Unlock()
	if h.Role == Essential {
		g.log.Error("an essential component failed: ending the run", "error", err)
		if g.fatal != nil {
			g.fatal(err)
		}
		return
	}
	g.log.Error("a component failed: it stays off, and the pod is not ready", "component", h.Name, "error", err)
}

// Failed returns the first failure of an essential component (named), nil
// while there is none.
func (g *Group) Failed() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.firstFatal
}

// SetHealth lets a running component report that it does not work (err
// set) or works again (nil). Unknown names are ignored.
func (g *Group) SetHealth(name string, err error) {
	g.mu.Lock()
	r, ok := g.byName[name]
	if !ok {
		g.mu.Unlock()
		return
	}
	was := r.health.Up
	r.health.Up, r.health.Err = err == nil, err
	if was && err != nil {
		r.health.Failures++
	}
	g.mu.Unlock()
	switch {
	case was && err != nil:
		g.log.Warn("component does not work", "component", name, "error", err)
	case !was && err == nil:
		g.log.Info("component works again", "component", name)
	}
}

// Health returns every component's state, in start order.
func (g *Group) Health() []Health {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Health, len(g.comps))
	for i, r := range g.comps {
		out[i] = r.health
	}
	return out
}

// stopWarn is how long Stop waits for a component before it says so in the
// log (it goes on waiting).
const stopWarn = 10 * time.Second

// Stop stops the components in the reverse of their start order, each
// finished before the next is asked, and returns when all are. It may be
// called more than once.
func (g *Group) Stop() {
	g.mu.Lock()
	g.stopped = true
	comps := g.comps
	g.mu.Unlock()
	for i := len(comps) - 1; i >= 0; i-- {
		r := comps[i]
		r.cancel()
		select {
		case <-r.done:
			continue
		case <-time.After(stopWarn):
			g.log.Warn("waiting for a component to stop", "component", r.health.Name, "waited", stopWarn)
		}
		<-r.done
	}
}

// Safe runs fn and turns a panic in it into an error that names what and
// carries the stack. Goroutines that a component starts for itself run
// through Safe too, so that no input ends the process.
func Safe(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s panicked: %v\n%s", what, p, debug.Stack())
		}
	}()
	return fn()
}
