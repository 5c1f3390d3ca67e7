package chaos

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Observed is a node whose addresses the Observer follows: a network
// namespace and the interface that carries the VIPs.
type Observed struct {
	Name, Netns, Link string
	// Addr is the node's own IPv4 address: the client probes the checked
	// service there too (see Data.Hiccups).
	Addr netip.Addr
}

// Observer follows, from netlink notifications in every node's namespace,
// which node holds each VIP: the VIP on the node's interface while the
// interface is up and has its carrier. Each change is timed when the
// notification arrives. A node whose link is cut or down keeps its
// addresses but answers nothing, so it holds nothing.
type Observer struct {
	vips []netip.Addr
	done chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	nodes   []*observedNode
	changes Holdings
	// entries is the client's neighbour entry of each VIP: which node's
	// MAC it sends to.
	entries Entries
	errs    []error
}

// EntryChange is a change of the client's neighbour entry (ARP or NDP) of
// a VIP: from At, the client sends to Node's MAC ("" when it has no
// usable entry: none yet, incomplete or failed; "?" for a MAC of no node).
type EntryChange struct {
	At   time.Time
	Node string
}

// Entries is the client's neighbour entry timeline of every VIP.
type Entries map[netip.Addr][]EntryChange

type observedNode struct {
	Observed
	index   int
	mac     string
	running bool
	addrs   map[netip.Addr]bool
}

// Observe starts following vips on nodes, and the client's neighbour
// entries of them in the client's namespace.
func Observe(nodes []Observed, clientNetns string, vips []netip.Addr) (*Observer, error) {
	o := &Observer{vips: vips, done: make(chan struct{}), changes: Holdings{}, entries: Entries{}}
	for _, n := range nodes {
		if err := o.follow(n); err != nil {
			o.Stop()
			return nil, err
		}
	}
	if err := o.followClient(clientNetns); err != nil {
		o.Stop()
		return nil, err
	}
	return o, nil
}

// followClient follows the client's neighbour entries of the VIPs.
func (o *Observer) followClient(name string) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", name, err)
	}
	defer ns.Close()
	ch := make(chan netlink.NeighUpdate, 256)
	if err := netlink.NeighSubscribeWithOptions(ch, o.done, netlink.NeighSubscribeOptions{
		Namespace: &ns, ListExisting: true, ErrorCallback: o.onErr("client"), ReceiveBufferSize: 1 << 20,
	}); err != nil {
		return fmt.Errorf("following the client's neighbours: %w", err)
	}
	o.wg.Go(func() {
		for u := range ch {
			a, ok := netip.AddrFromSlice(u.IP)
			if !ok || !slices.Contains(o.vips, a.Unmap()) {
				continue
			}
			a = a.Unmap()
			mac := ""
			const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
			if u.Type == unix.RTM_NEWNEIGH && u.State&usable != 0 {
				mac = u.HardwareAddr.String()
			}
			at := time.Now()
			o.mu.Lock()
			node := ""
			if mac != "" {
				node = "?"
				for _, n := range o.nodes {
					if n.mac == mac {
						node = n.Name
					}
				}
			}
			cs := o.entries[a]
			if n := len(cs); n == 0 || cs[n-1].Node != node {
				o.entries[a] = append(cs, EntryChange{At: at, Node: node})
			}
			o.mu.Unlock()
		}
		o.onErr("client")(fmt.Errorf("stopped following the neighbour entries"))
	})
	return nil
}

// onErr returns the error callback of the subscriptions of what. The
// subscriptions fail with whatever their closed sockets say once Stop
// closed them: only errors before that count.
func (o *Observer) onErr(what string) func(error) {
	return func(err error) {
		select {
		case <-o.done:
			return
		default:
		}
		o.mu.Lock()
		o.errs = append(o.errs, fmt.Errorf("%s at %s: netlink: %w", what, time.Now().Format(time.StampMilli), err))
		o.mu.Unlock()
	}
}

func (o *Observer) follow(n Observed) error {
	ns, err := netns.GetFromName(n.Netns)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", n.Netns, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", n.Netns, err)
	}
	link, err := h.LinkByName(n.Link)
	h.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	on := &observedNode{Observed: n, index: link.Attrs().Index, addrs: map[netip.Addr]bool{}}
	o.mu.Lock()
	o.nodes = append(o.nodes, on)
	o.mu.Unlock()

	addrs := make(chan netlink.AddrUpdate, 256)
	links := make(chan netlink.LinkUpdate, 64)
	onErr := o.onErr(n.Name)
	// A subscription whose channel closes before Stop has stopped
	// following the node: the timeline cannot be trusted after that.
	lost := func(what string) {
		onErr(fmt.Errorf("stopped following %s", what))
	}
	if err := netlink.LinkSubscribeWithOptions(links, o.done, netlink.LinkSubscribeOptions{
		Namespace: &ns, ListExisting: true, ErrorCallback: onErr, ReceiveBufferSize: 1 << 20,
	}); err != nil {
		return fmt.Errorf("%s: following links: %w", n.Name, err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, o.done, netlink.AddrSubscribeOptions{
		Namespace: &ns, ListExisting: true, ErrorCallback: onErr, ReceiveBufferSize: 1 << 20,
	}); err != nil {
		return fmt.Errorf("%s: following addresses: %w", n.Name, err)
	}
	o.wg.Go(func() {
		// Until both subscriptions end: Stop closes their sockets, which
		// closes the channels.
		for links != nil || addrs != nil {
			select {
			case u, ok := <-links:
				if !ok {
					lost("the link")
					links = nil
					continue
				}
				if u.Attrs().Index != on.index {
					continue
				}
				running := u.Attrs().OperState == netlink.OperUp || u.Attrs().RawFlags&unix.IFF_RUNNING != 0
				mac := u.Attrs().HardwareAddr.String()
				o.update(time.Now(), func() { on.running, on.mac = running, mac })
			case u, ok := <-addrs:
				if !ok {
					lost("the addresses")
					addrs = nil
					continue
				}
				a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
				if !ok || u.LinkIndex != on.index {
					continue
				}
				a = a.Unmap()
				o.update(time.Now(), func() {
					if u.NewAddr {
						on.addrs[a] = true
					} else {
						delete(on.addrs, a)
					}
				})
			}
		}
	})
	return nil
}

// update applies change and notes every VIP whose holders it changed.
func (o *Observer) update(at time.Time, change func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	change()
	for _, v := range o.vips {
		h := o.holdersLocked(v)
		cs := o.changes[v]
		if n := len(cs); n > 0 && slices.Equal(cs[n-1].Holders, h) {
			continue
		}
		o.changes[v] = append(cs, HolderChange{At: at, Holders: h})
	}
}

func (o *Observer) holdersLocked(v netip.Addr) []string {
	h := []string{}
	for _, n := range o.nodes {
		if n.running && n.addrs[v] {
			h = append(h, n.Name)
		}
	}
	slices.Sort(h)
	return h
}

// Holders returns the holders of v now.
func (o *Observer) Holders(v netip.Addr) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holdersLocked(v)
}

// Stop ends following and returns every VIP's holder changes, the
// client's entries, and the errors the subscriptions met.
func (o *Observer) Stop() (Holdings, Entries, []error) {
	select {
	case <-o.done:
	default:
		close(o.done)
	}
	o.wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes, o.entries, o.errs
}
