package chaos

import (
	"errors"
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
	// Addr4 and Addr6 are the node's own addresses: the client probes
	// the checked service there too (see Data.Controls and Controls6).
	Addr4, Addr6 netip.Addr
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
	// unannounced are the VIPs the client followed to a node whose kernel
	// listed them but had not announced them (see Unannounced).
	unannounced Unannounced
	// listings asks lister to read a node's address list.
	listings chan listing
	errs     []error
}

// Unannounced are the moments the client's neighbour entry of a VIP named
// a node that listed the VIP on its running link (an address dump) while
// its kernel had not announced it (no RTM_NEWADDR yet). For an IPv6
// address added without DAD, as keepalived adds its VIPs, Linux defers
// the announcement and the address's local route, without which the node
// does not take the packets, to a work item of its own; the address dump
// lists the address from its addition on. So from such a moment until the
// announcement the VIP was where VRRP and the client agreed, and the
// node's kernel had not yet made it reachable: a kernel late at its own
// work (on the lab's one kernel, a busy node delays every node's), not a
// failover (see Data.unannouncedSpans).
type Unannounced map[netip.Addr][]Listed

// Listed is a VIP the client followed to Node at At, found in Node's
// address list (at Dumped) before its kernel announced it.
type Listed struct {
	Node       string
	At, Dumped time.Time
}

// listing asks for node's address list when the client's entry of vip
// named it at at, before the node announced vip.
type listing struct {
	node *observedNode
	vip  netip.Addr
	at   time.Time
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
	// handle reads the node's address list (Observer.lister alone).
	handle *netlink.Handle
}

// holds reports whether the node holds v by its notifications: v on its
// link, the link running (with the Observer's lock held).
func (n *observedNode) holds(v netip.Addr) bool { return n.running && n.addrs[v] }

// Observe starts following vips on nodes, and the client's neighbour
// entries of them in the client's namespace.
func Observe(nodes []Observed, clientNetns string, vips []netip.Addr) (*Observer, error) {
	o := &Observer{vips: vips, done: make(chan struct{}), changes: Holdings{}, entries: Entries{},
		unannounced: Unannounced{}, listings: make(chan listing, 64)}
	o.wg.Go(o.lister)
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
			var to *observedNode
			if mac != "" {
				node = "?"
				for _, n := range o.nodes {
					if n.mac == mac {
						node, to = n.Name, n
					}
				}
			}
			cs := o.entries[a]
			changed := len(cs) == 0 || cs[len(cs)-1].Node != node
			if changed {
				o.entries[a] = append(cs, EntryChange{At: at, Node: node})
			}
			o.mu.Unlock()
			if changed && to != nil {
				o.list(listing{node: to, vip: a, at: at})
			}
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
	if err != nil {
		h.Close()
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	on := &observedNode{Observed: n, index: link.Attrs().Index, addrs: map[netip.Addr]bool{}, handle: h}
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
				o.update(func() { on.running, on.mac = running, mac })
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
				o.update(func() {
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

// list asks the lister for l's address list, unless l.vip is IPv4 (Linux
// announces an IPv4 address as it adds it), the node announced l.vip
// already, or the lister is behind (the moment is then not judged).
func (o *Observer) list(l listing) {
	if !l.vip.Is6() {
		return
	}
	o.mu.Lock()
	held := l.node.holds(l.vip)
	o.mu.Unlock()
	if held {
		return
	}
	select {
	case o.listings <- l:
	default:
		o.onErr("the address lists")(fmt.Errorf("%s: %s's address list not read: the lister is behind", l.vip, l.node.Name))
	}
}

// lister reads the address lists the client's entries ask for (list) and
// notes a VIP listed on a running link before its kernel announced it.
func (o *Observer) lister() {
	for {
		var l listing
		select {
		case <-o.done:
			return
		case l = <-o.listings:
		}
		// A dump the kernel interrupts (the addresses changed meanwhile,
		// as they do in a failover, or the kernel's address work ran) is
		// read again. One still interrupted after that lists what the
		// kernel held as it wrote it: it shows a VIP listed, but its
		// missing the VIP proves nothing, which records nothing either.
		family := netlink.FAMILY_V4
		if l.vip.Is6() {
			family = netlink.FAMILY_V6
		}
		var addrs []netlink.Addr
		var err error
		for try := range 5 {
			if try > 0 && sleepOrDone(o.done, 2*time.Millisecond) {
				return
			}
			addrs, err = l.node.handle.AddrList(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: l.node.index}}, family)
			if !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		dumped := time.Now()
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			o.onErr(l.node.Name)(fmt.Errorf("listing the addresses: %w", err))
			continue
		}
		listed := slices.ContainsFunc(addrs, func(a netlink.Addr) bool {
			ip, ok := netip.AddrFromSlice(a.IP)
			return ok && ip.Unmap() == l.vip
		})
		o.mu.Lock()
		es := o.entries[l.vip]
		if listed && l.node.running && !l.node.holds(l.vip) && len(es) > 0 && es[len(es)-1].Node == l.node.Name {
			o.unannounced[l.vip] = append(o.unannounced[l.vip], Listed{Node: l.node.Name, At: l.at, Dumped: dumped})
		}
		o.mu.Unlock()
	}
}

// sleepOrDone sleeps d and reports whether done closed meanwhile.
func sleepOrDone(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// update applies change and notes every VIP whose holders it changed,
// timed when it holds the lock: the nodes' notifications arrive on
// goroutines of their own, and a moment read before the lock could be
// older than the last change noted, a timeline out of order.
func (o *Observer) update(change func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at := time.Now()
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
		if n.holds(v) {
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

// Observation is what an Observer saw.
type Observation struct {
	Holdings    Holdings
	Entries     Entries
	Unannounced Unannounced
	// Errs are the errors the subscriptions and the lister met.
	Errs []error
}

// Stop ends following and returns what was seen.
func (o *Observer) Stop() Observation {
	select {
	case <-o.done:
	default:
		close(o.done)
	}
	o.wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.nodes {
		n.handle.Close()
	}
	return Observation{Holdings: o.changes, Entries: o.entries, Unannounced: o.unannounced, Errs: o.errs}
}
