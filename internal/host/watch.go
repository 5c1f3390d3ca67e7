package host

import (
	"context"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
)

// resubscribeDelay is the pause before a subscription that the kernel
// ended (its queue overflowed) is made again.
const resubscribeDelay = time.Second

// WatchAddrs reports changes of the addresses on iface (every interface
// when iface is empty), from the kernel's address notifications (no
// polling). The returned channel gets a value
// once at the start and after every change; values coalesce, so a burst of
// changes (keepalived adding 85 VIPs) wakes the reader once or twice, and
// the reader lists the addresses again. When the kernel drops the
// subscription (its queue overflowed under a storm of changes), it is made
// again after a second, followed by a value, since changes may have been
// missed. The channel is closed when ctx ends. Subscribing needs no
// capability.
func (n *Netlink) WatchAddrs(ctx context.Context, iface string) (<-chan struct{}, error) {
	index := anyLink
	if iface != "" {
		link, err := n.link(iface)
		if err != nil {
			return nil, err
		}
		index = link.Attrs().Index
	}
	updates, done, err := n.subscribeAddrs()
	if err != nil {
		return nil, fmt.Errorf("subscribing to address changes: %w", err)
	}
	out := make(chan struct{}, 1)
	out <- struct{}{}
	go func() {
		defer close(out)
		for {
			if forward(ctx, updates, index, out) {
				// The library's reader may be blocked on a full
				// channel: drain it so that it sees the close and ends.
				close(done)
				for range updates {
				}
				return
			}
			// The kernel ended the subscription: make it again.
			close(done)
			for updates == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(resubscribeDelay):
				}
				updates, done, err = n.subscribeAddrs()
				if err != nil {
					updates = nil
				}
			}
			notify(out)
		}
	}()
	return out, nil
}

// anyLink is the index that matches every interface.
const anyLink = -1

// forward passes the updates for the interface with index (any with
// anyLink) on to out until ctx ends (true) or updates is closed (false).
func forward(ctx context.Context, updates <-chan netlink.AddrUpdate, index int, out chan<- struct{}) bool {
	for {
		select {
		case <-ctx.Done():
			return true
		case u, ok := <-updates:
			if !ok {
				return false
			}
			if index == anyLink || u.LinkIndex == index {
				notify(out)
			}
		}
	}
}

func notify(out chan<- struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

func (n *Netlink) subscribeAddrs() (<-chan netlink.AddrUpdate, chan struct{}, error) {
	// Buffered, so the library's reader keeps up with a burst while the
	// consumer lists addresses.
	updates := make(chan netlink.AddrUpdate, 256)
	done := make(chan struct{})
	opts := netlink.AddrSubscribeOptions{ReceiveBufferSize: 1 << 20}
	if n.ns.IsOpen() {
		opts.Namespace = &n.ns
	}
	if err := netlink.AddrSubscribeWithOptions(updates, done, opts); err != nil {
		close(done)
		return nil, nil, err
	}
	return updates, done, nil
}
