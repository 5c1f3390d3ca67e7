package lab

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The netfilter queue protocol (linux/netfilter/nfnetlink_queue.h): the
// kernel hands each packet a rule sends to a queue to the program bound to
// it, and holds the packet until the program says what to do with it. A
// program may answer in any order, which is how delayQueue delays and
// reorders. Only the constants this file uses.
const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind   = 1
	nfqnlCfgCmdUnbind = 2
	nfqnlCopyMeta     = 1
	nfqaCfgFFailOpen  = 1

	nfAccept = 1

	// queueMaxLen is how many packets the kernel holds for the program;
	// past it (fail-open) packets pass undelayed rather than dropped.
	queueMaxLen = 4096
)

// delayQueue holds every packet of one netfilter queue for a delay drawn
// from [delay-jitter, delay+jitter] and then lets it go: packets sent
// closer together than the jitter overtake each other. It lives in the
// network namespace it was opened in.
type delayQueue struct {
	fd            int
	num           uint16
	delay, jitter time.Duration
	rng           *rand.Rand

	mu      sync.Mutex
	pending packetHeap
	wake    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	err     error
	// held counts the packets delayed, for tests and logs.
	held int
}

// openDelayQueue binds queue num in the calling thread's network namespace
// (call it from InNetns) and starts releasing packets after their delay.
func openDelayQueue(num uint16, delay, jitter time.Duration, seed uint64) (*delayQueue, error) {
	if jitter > delay {
		return nil, fmt.Errorf("lab: jitter %s larger than the delay %s", jitter, delay)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	// No ENOBUFS: a burst the socket cannot hold fails open in the kernel.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	// Reads time out now and then, so the reader sees Close.
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netfilter netlink socket timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding the netfilter netlink socket: %w", err)
	}
	q := &delayQueue{fd: fd, num: num, delay: delay, jitter: jitter,
		rng: rand.New(rand.NewPCG(seed, uint64(num))), wake: make(chan struct{}, 1), done: make(chan struct{})}
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0) // copy range: no payload
	params[4] = nfqnlCopyMeta
	maxLen := binary.BigEndian.AppendUint32(nil, queueMaxLen)
	flags := binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen)
	for _, attrs := range [][]nlAttr{
		{{nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, 0}}},
		{{nfqaCfgParams, params}, {nfqaCfgQueueMax, maxLen}, {nfqaCfgFlags, flags}, {nfqaCfgMask, flags}},
	} {
		if err := q.request(nfqnlMsgConfig, attrs, true); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("configuring netfilter queue %d: %w", num, err)
		}
	}
	q.wg.Go(q.receive)
	q.wg.Go(q.release)
	return q, nil
}

type nlAttr struct {
	typ  uint16
	data []byte
}

// request sends one nfnetlink_queue message; with ack it waits for the
// kernel's answer and returns its error. Before receive runs only.
func (q *delayQueue) request(msgType uint16, attrs []nlAttr, ack bool) error {
	b := make([]byte, unix.NLMSG_HDRLEN, 64)
	b = append(b, unix.AF_UNSPEC, 0 /* NFNETLINK_V0 */, byte(q.num>>8), byte(q.num))
	for _, a := range attrs {
		l := 4 + len(a.data)
		b = binary.NativeEndian.AppendUint16(b, uint16(l))
		b = binary.NativeEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	flags := uint16(unix.NLM_F_REQUEST)
	if ack {
		flags |= unix.NLM_F_ACK
	}
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], nfnlSubsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(b[6:], flags)
	if err := unix.Sendto(q.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if !ack {
		return nil
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
				return unix.Errno(-errno)
			}
		}
	}
	return nil
}

// receive reads the queued packets' ids and schedules each one's release.
func (q *delayQueue) receive() {
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-q.done:
			return
		default:
		}
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			q.mu.Lock()
			q.err = fmt.Errorf("reading netfilter queue %d: %w", q.num, err)
			q.mu.Unlock()
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		now := time.Now()
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysQueue<<8|nfqnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			id, ok := packetID(m.Data[4:])
			if !ok {
				continue
			}
			d := q.delay
			if q.jitter > 0 {
				d += time.Duration(q.rng.Int64N(int64(2*q.jitter+1))) - q.jitter
			}
			q.mu.Lock()
			heap.Push(&q.pending, heldPacket{id: id, at: now.Add(d)})
			q.held++
			q.mu.Unlock()
			select {
			case q.wake <- struct{}{}:
			default:
			}
		}
	}
}

// packetID finds NFQA_PACKET_HDR's packet id among attrs.
func packetID(attrs []byte) (uint32, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs))
		typ := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
		if l < 4 || l > len(attrs) {
			return 0, false
		}
		if typ == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(attrs[4:]), true
		}
		attrs = attrs[min((l+3)&^3, len(attrs)):]
	}
	return 0, false
}

// release accepts each held packet once its time has come.
func (q *delayQueue) release() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		var due []uint32
		now := time.Now()
		for q.pending.Len() > 0 && !q.pending[0].at.After(now) {
			due = append(due, heap.Pop(&q.pending).(heldPacket).id)
		}
		next := time.Hour
		if q.pending.Len() > 0 {
			next = q.pending[0].at.Sub(now)
		}
		q.mu.Unlock()
		for _, id := range due {
			q.verdict(id)
		}
		timer.Reset(next)
		select {
		case <-q.done:
			return
		case <-q.wake:
		case <-timer.C:
		}
	}
}

func (q *delayQueue) verdict(id uint32) {
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	// A verdict that cannot be sent leaves the packet to the kernel, which
	// drops it when the queue is unbound: a lost packet, nothing worse.
	_ = q.request(nfqnlMsgVerdict, []nlAttr{{nfqaVerdictHdr, v}}, false)
}

// Close lets every held packet go at once, unbinds the queue and closes the
// socket. It returns the first error receiving met, if any.
func (q *delayQueue) Close() error {
	close(q.done)
	q.wg.Wait()
	q.mu.Lock()
	var ids []uint32
	for q.pending.Len() > 0 {
		ids = append(ids, heap.Pop(&q.pending).(heldPacket).id)
	}
	q.mu.Unlock()
	for _, id := range ids {
		q.verdict(id)
	}
	_ = q.request(nfqnlMsgConfig, []nlAttr{{nfqaCfgCmd, []byte{nfqnlCfgCmdUnbind, 0, 0, 0}}}, false)
	unix.Close(q.fd)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Held returns how many packets the queue has delayed so far.
func (q *delayQueue) Held() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}

type heldPacket struct {
	id uint32
	at time.Time
}

type packetHeap []heldPacket

func (h packetHeap) Len() int           { return len(h) }
func (h packetHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h packetHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *packetHeap) Push(x any)        { *h = append(*h, x.(heldPacket)) }
func (h *packetHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
