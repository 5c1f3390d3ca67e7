package splitbrain

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// contestRun drives contests on a fake clock and writes down, in order,
// what it asked for: "0.2s probe 192.0.2.100 to 02:00:00:00:00:0b",
// "0.4s end 192.0.2.100", "0.4s announce 192.0.2.100".
type contestRun struct {
	c       *contests
	start   time.Time
	now     time.Time
	events  []string
	answers func(p probeTo) bool
}

func newContestRun() *contestRun {
	start := time.Unix(1000, 0)
	return &contestRun{c: newContests(timing{contest: 200 * time.Millisecond, spacing: time.Second}), start: start, now: start}
}

func (r *contestRun) at() string { return fmt.Sprintf("%.1fs", r.now.Sub(r.start).Seconds()) }

func (r *contestRun) sent(ps []probeTo) {
	for _, p := range ps {
		to := "everyone"
		if p.mac != nil {
			to = p.mac.String()
		}
		r.events = append(r.events, fmt.Sprintf("%s probe %s to %s", r.at(), p.vip, to))
	}
	// The hosts that still have the VIP answer at once.
	for _, p := range ps {
		if r.answers != nil && r.answers(p) {
			mac := p.mac
			if mac == nil {
				mac = macB
			}
			r.c.claim(r.now, p.vip, mac)
		}
	}
}

func (r *contestRun) claim(v netip.Addr, mac net.HardwareAddr) {
	r.sent(r.c.claim(r.now, v, mac))
}

// until runs everything due up to at (since the start).
func (r *contestRun) until(at time.Duration) {
	for {
		next, ok := r.c.next()
		if !ok || next.Sub(r.start) > at {
			break
		}
		r.now = next
		probes, ended, announce, again := r.c.due(r.now)
		for _, e := range ended {
			still := ""
			if len(e.still) > 0 {
				still = " (" + macList(e.still) + " still)"
			}
			r.events = append(r.events, fmt.Sprintf("%s end %s after %v with %s%s", r.at(), e.vip, e.lasted, macList(e.macs), still))
		}
		for _, v := range announce {
			r.events = append(r.events, fmt.Sprintf("%s announce %s", r.at(), v))
		}
		for _, v := range again {
			r.events = append(r.events, fmt.Sprintf("%s announce %s again", r.at(), v))
		}
		r.sent(probes)
	}
	r.now = r.start.Add(at)
}

func TestContests(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.100")
	vip6 := netip.MustParseAddr("2001:db8::100")
	mb := macB.String()
	tests := []struct {
		name   string
		script func(r *contestRun)
		want   []string
	}{{
		name: "the other host lets go: announced after the first round it does not answer, two rounds at most",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			holding := true
			r.answers = func(probeTo) bool { return holding }
			r.claim(vip, macB) // its gratuitous ARP as it takes the VIP too
			r.until(time.Second)
			holding = false
			r.until(2 * time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s probe 192.0.2.100 to " + mb,
			"0.4s probe 192.0.2.100 to " + mb,
			"0.6s probe 192.0.2.100 to " + mb,
			"0.8s probe 192.0.2.100 to " + mb,
			"1.0s probe 192.0.2.100 to " + mb, // answered: it lets go just after
			"1.2s probe 192.0.2.100 to " + mb,
			"1.4s end 192.0.2.100 after 1.4s with " + mb,
			"1.4s announce 192.0.2.100",
		},
	}, {
		// The old master's solicitation from the VIP, sent as it let go,
		// pointed a client back at it: nothing this node sees.
		name: "taken: announced once more a round after keepalived's MASTER",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip, vip6}))
			r.c.taken(r.now, []netip.Addr{vip, vip6})
			r.until(3 * time.Second)
		},
		want: []string{
			"0.2s announce 192.0.2.100 again",
			"0.2s announce 2001:db8::100 again",
		},
	}, {
		// The contest's end announces it; once is enough.
		name: "taken while the old master still answers: the contest's end announces it",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			holding := true
			r.answers = func(probeTo) bool { return holding }
			r.c.taken(r.now, []netip.Addr{vip})
			r.claim(vip, macB)
			r.until(250 * time.Millisecond)
			holding = false
			r.until(3 * time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s probe 192.0.2.100 to " + mb, // answered: no announcement yet
			"0.4s probe 192.0.2.100 to " + mb,
			"0.6s end 192.0.2.100 after 600ms with " + mb,
			"0.6s announce 192.0.2.100",
		},
	}, {
		// A contest ended just before: the clients came back a moment ago.
		name: "taken just after a contest's announcement: not announced again",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.claim(vip, macB)
			r.until(100 * time.Millisecond)
			r.c.taken(r.now, []netip.Addr{vip})
			r.until(3 * time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s end 192.0.2.100 after 200ms with " + mb,
			"0.2s announce 192.0.2.100",
		},
	}, {
		name: "a probe from a host that does not have the VIP (a stray's remover): one round",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.claim(vip, macB)
			r.until(time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s end 192.0.2.100 after 200ms with " + mb,
			"0.2s announce 192.0.2.100",
		},
	}, {
		name: "a claim without a MAC (a DAD probe) is asked of everyone",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip6}))
			r.claim(vip6, nil)
			r.until(time.Second)
		},
		want: []string{
			"0.0s probe 2001:db8::100 to everyone",
			"0.2s end 2001:db8::100 after 200ms with ",
			"0.2s announce 2001:db8::100",
		},
	}, {
		name: "this node lets go first: no announcement",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.answers = func(probeTo) bool { return true }
			r.claim(vip, macB)
			r.until(300 * time.Millisecond)
			r.sent(r.c.setHeld(r.now, nil))
			r.until(2 * time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s probe 192.0.2.100 to " + mb,
		},
	}, {
		name: "a claim read before this node let the VIP go starts nothing",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.sent(r.c.setHeld(r.now, nil))
			r.claim(vip, macB)
			r.until(time.Second)
		},
		want: nil,
	}, {
		name: "a claim read just before this node's listing shows the VIP (two backups took it at once, the other yielded): a contest",
		script: func(r *contestRun) {
			r.claim(vip, macB) // its gratuitous ARP as it takes the VIP, 2 ms after this node did
			r.until(50 * time.Millisecond)
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.until(time.Second)
		},
		want: []string{
			"0.1s probe 192.0.2.100 to " + mb,
			"0.2s end 192.0.2.100 after 200ms with " + mb,
			"0.2s announce 192.0.2.100",
		},
	}, {
		name: "a claim more than a round before the VIP arrives starts nothing",
		script: func(r *contestRun) {
			r.claim(vip, macB)
			r.until(300 * time.Millisecond)
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.until(2 * time.Second)
		},
		want: nil,
	}, {
		name: "announcements of a VIP a second apart at least",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			r.claim(vip, macB)
			r.until(300 * time.Millisecond)
			r.claim(vip, macB)
			r.until(3 * time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s end 192.0.2.100 after 200ms with " + mb,
			"0.2s announce 192.0.2.100",
			"0.3s probe 192.0.2.100 to " + mb,
			"0.5s end 192.0.2.100 after 200ms with " + mb,
			"1.2s announce 192.0.2.100",
		},
	}, {
		name: "two other hosts: the contest lasts while either answers, and one letting go is announced at once",
		script: func(r *contestRun) {
			r.sent(r.c.setHeld(r.now, []netip.Addr{vip}))
			macC := net.HardwareAddr{2, 0, 0, 0, 0, 0x0c}
			bHolds, cHolds := true, true
			r.answers = func(p probeTo) bool {
				return p.mac.String() == macC.String() && cHolds || p.mac.String() == mb && bHolds
			}
			r.claim(vip, macB)
			r.claim(vip, macC)
			r.until(500 * time.Millisecond)
			// B yields (a healed partition); C, a dead node's kernel,
			// still answers for the VIP: B's clients come back now.
			bHolds = false
			r.until(1500 * time.Millisecond)
			cHolds = false
			r.until(3 * time.Second)
		},
		want: []string{
			"0.0s probe 192.0.2.100 to " + mb,
			"0.2s probe 192.0.2.100 to " + mb,
			"0.2s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"0.4s probe 192.0.2.100 to " + mb,
			"0.4s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"0.6s probe 192.0.2.100 to " + mb, // unanswered: B let go at 0.5s
			"0.6s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"0.8s end 192.0.2.100 after 800ms with " + mb + " (02:00:00:00:00:0c still)",
			"0.8s announce 192.0.2.100",
			"0.8s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"1.0s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"1.2s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"1.4s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"1.6s probe 192.0.2.100 to 02:00:00:00:00:0c",
			"1.8s end 192.0.2.100 after 1.8s with 02:00:00:00:00:0c",
			"1.8s announce 192.0.2.100",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newContestRun()
			tt.script(r)
			if !slices.Equal(r.events, tt.want) {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(r.events, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestContestsStretch: with many contests at once, rounds stretch to gap
// per contest, so the probes a node sends per second stay bounded however
// many VIPs are contested; a single contest keeps its short round.
func TestContestsStretch(t *testing.T) {
	start := time.Unix(1000, 0)
	c := newContests(timing{contest: 200 * time.Millisecond, contestGap: 10 * time.Millisecond, spacing: time.Second})
	var held []netip.Addr
	for i := range 200 {
		held = append(held, netip.AddrFrom4([4]byte{198, 51, 100 + byte(i/250), byte(i%250 + 1)}))
	}
	c.setHeld(start, held)
	// Every VIP contested, every probe answered (both hosts keep them),
	// for ten seconds.
	now := start
	probes := 0
	for _, v := range held {
		ps := c.claim(now, v, macB)
		probes += len(ps)
		for _, p := range ps {
			c.claim(now, p.vip, p.mac)
		}
	}
	for {
		next, ok := c.next()
		if !ok || next.Sub(start) > 10*time.Second {
			break
		}
		now = next
		ps, _, _, _ := c.due(now)
		probes += len(ps)
		for _, p := range ps {
			c.claim(now, p.vip, p.mac)
		}
	}
	// 200 contests: rounds of 2 s, about 100 probes a second.
	if perSecond := float64(probes) / 10; perSecond > 130 {
		t.Errorf("%d contests sent %.0f probes a second, want about 1 per 10ms", len(held), perSecond)
	}
	// One contest alone: 200 ms rounds.
	one := newContests(timing{contest: 200 * time.Millisecond, contestGap: 10 * time.Millisecond, spacing: time.Second})
	one.setHeld(start, held[:1])
	one.claim(start, held[0], macB)
	if next, _ := one.next(); next.Sub(start) != 200*time.Millisecond {
		t.Errorf("one contest: round %v, want 200ms", next.Sub(start))
	}
}
