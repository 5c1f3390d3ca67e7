package splitbrain

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Heartbeats. A VRRP backup sends nothing, so a node hears a peer only
// while that peer is master of something, and a path that drops IP
// protocol 112 (a host firewall) shows only once both ends hold the same
// VIPs. So every guard sends each unicast peer, every heartbeatEvery, a
// VRRP packet that no VRRP router takes for an advert of its own: VRRPv3,
// router id 0 (routers have 1..255; keepalived drops an unknown router id
// without a word), priority 0, no address. It takes the path VRRP takes,
// from node address to node address. A peer that sends heartbeats
// (plan.Fleet.Heartbeats) and whose heartbeats stop arriving for
// heartbeatSilent is silent: its VRRP does not reach this node.
const (
	heartbeatEvery  = time.Second
	heartbeatSilent = 3 * heartbeatEvery
	// vridHeartbeat is the heartbeats' router id.
	vridHeartbeat = 0
)

// heartbeatPacket is a heartbeat from src to dst: the VRRPv3 header alone,
// with a checksum over the IPv4 pseudo-header (IPv6 leaves it to the
// receiver's indifference: no router takes router id 0).
func heartbeatPacket(src, dst netip.Addr) []byte {
	b := make([]byte, 8)
	b[0] = 3<<4 | 1 // VRRPv3, advertisement
	b[1], b[2], b[3] = vridHeartbeat, 0, 0
	binary.BigEndian.PutUint16(b[4:6], uint16(heartbeatEvery/(10*time.Millisecond)))
	if src.Is4() && dst.Is4() {
		s4, d4 := src.As4(), dst.As4()
		var sum uint32
		for _, w := range [][]byte{s4[:2], s4[2:], d4[:2], d4[2:]} {
			sum += uint32(binary.BigEndian.Uint16(w))
		}
		sum += 112 + uint32(len(b))
		for i := 0; i < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(b[6:8], ^uint16(sum))
	}
	return b
}

// isHeartbeat says whether b, a VRRP message as a raw socket delivers it,
// is a heartbeat.
func isHeartbeat(b []byte) bool {
	return len(b) >= 8 && b[0] == 3<<4|1 && b[1] == vridHeartbeat && b[2] == 0 && b[3] == 0
}

// PeerHeard is what the guard hears of one peer that sends heartbeats.
type PeerHeard struct {
	Addr netip.Addr
	// Silent says that no heartbeat of it arrived for heartbeatSilent,
	// once it had that long to send one.
	Silent bool
	// Last is when its last heartbeat arrived (zero: none yet).
	Last time.Time
}

// heartbeats keeps, per peer that sends heartbeats, when it became one and
// when its last heartbeat arrived. The readers note arrivals, the loop
// the peers and the silences; safe for concurrent use.
type heartbeats struct {
	mu    sync.Mutex
	peers map[netip.Addr]*peerState
}

type peerState struct {
	since, last time.Time
	silent      bool
}

func newHeartbeats() *heartbeats { return &heartbeats{peers: map[netip.Addr]*peerState{}} }

// setPeers makes addrs the peers that send heartbeats: new ones from now,
// the others as they were.
func (h *heartbeats) setPeers(addrs []netip.Addr, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for a := range h.peers {
		if !slices.Contains(addrs, a) {
			delete(h.peers, a)
		}
	}
	for _, a := range addrs {
		if _, ok := h.peers[a]; !ok {
			h.peers[a] = &peerState{since: now}
		}
	}
}

// heard notes a heartbeat from src; it reports whether src was silent.
func (h *heartbeats) heard(src netip.Addr, now time.Time) (wasSilent bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.peers[src]
	if !ok {
		return false
	}
	p.last = now
	wasSilent, p.silent = p.silent, false
	return wasSilent
}

// silences marks the peers whose heartbeats stopped and returns those that
// just fell silent.
func (h *heartbeats) silences(now time.Time) (fell []PeerHeard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for a, p := range h.peers {
		from := p.since
		if p.last.After(from) {
			from = p.last
		}
		if p.silent || now.Sub(from) < heartbeatSilent {
			continue
		}
		p.silent = true
		fell = append(fell, PeerHeard{Addr: a, Silent: true, Last: p.last})
	}
	slices.SortFunc(fell, func(a, b PeerHeard) int { return a.Addr.Compare(b.Addr) })
	return fell
}

// snapshot lists the peers, sorted.
func (h *heartbeats) snapshot() []PeerHeard {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]PeerHeard, 0, len(h.peers))
	for a, p := range h.peers {
		out = append(out, PeerHeard{Addr: a, Silent: p.silent, Last: p.last})
	}
	slices.SortFunc(out, func(a, b PeerHeard) int { return a.Addr.Compare(b.Addr) })
	return out
}
