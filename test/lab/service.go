package lab

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Service is the monitored service of a node: a TCP server in the node's
// network namespace that accepts connections and closes them, which is all
// the default check (a TCP connect to the node's address) asks for, and all
// a Prober's connect needs. On 0.0.0.0 it answers for the VIPs the node
// holds too.
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

// ServeNameIn listens on address in the network namespace netnsName and
// answers every HTTP request with name: a node's service that tells a
// client which node answered.
func ServeNameIn(netnsName, address, name string) (*Service, error) {
	ln, err := listenIn(netnsName, address)
	if err != nil {
		return nil, err
	}
	s := &Service{ln: ln}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, name)
	})}
	s.wg.Go(func() { _ = srv.Serve(ln) })
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
	var ln net.Listener
	err := InNetns(netnsName, func() error {
		var err error
		ln, err = net.Listen("tcp", address)
		return err
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("listening on %s in %s: %w", address, netnsName, err)
	}
	return ln, nil
}
