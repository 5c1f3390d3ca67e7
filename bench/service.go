package bench

import (
	"fmt"
	"net"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
)

// Service is the monitored service of a node: a TCP server in the node's
// network namespace that accepts connections and closes them, which is all
// the default check (a TCP connect to the node's address) asks for.
type Service struct {
	ln   net.Listener
	wg   sync.WaitGroup
	once sync.Once
}

// ListenIn starts a Service on address (IP literal and port) in the named
// network namespace. The socket is created on a thread that sits in the
// namespace for that call only; it stays in the namespace afterwards.
func ListenIn(netnsName, address string) (*Service, error) {
	ln, err := listenIn(netnsName, address)
	if err != nil {
		return nil, err
	}
	s := &Service{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Stop
			}
			c.Close()
		}
	})
	return s, nil
}

// Stop closes the listener: the next connect is refused.
func (s *Service) Stop() {
	s.once.Do(func() {
		s.ln.Close()
		s.wg.Wait()
	})
}

func listenIn(netnsName, address string) (net.Listener, error) {
	target, err := netns.GetFromName(netnsName)
	if err != nil {
		return nil, fmt.Errorf("opening netns %s: %w", netnsName, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("reading the current netns: %w", err)
	}
	defer origin.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering netns %s: %w", netnsName, err)
	}
	ln, lnErr := net.Listen("tcp", address)
	if err := netns.Set(origin); err != nil {
		// The thread stays locked and dies with the goroutine: it must
		// not run anything else in the wrong namespace.
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("returning from netns %s: %w", netnsName, err)
	}
	runtime.UnlockOSThread()
	if lnErr != nil {
		return nil, fmt.Errorf("listening on %s in %s: %w", address, netnsName, lnErr)
	}
	return ln, nil
}
