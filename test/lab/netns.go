package lab

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNetns runs fn on a thread that sits in the named network namespace, so
// sockets fn creates belong to it; they stay there after InNetns returns.
// fn must not start goroutines or resolve names: only its own thread moves.
func InNetns(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", name, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("reading the current netns: %w", err)
	}
	defer origin.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering netns %s: %w", name, err)
	}
	fnErr := fn()
	if err := netns.Set(origin); err != nil {
		// The thread stays locked and dies with its goroutine: it must
		// not run anything else in the wrong namespace.
		return fmt.Errorf("returning from netns %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}
