package lab

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/wait"
)

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	tests := []struct {
		name  string
		sent  []time.Time
		acked []bool
		want  time.Duration
	}{
		{"none sent", nil, nil, 0},
		{"all answered", at(0, 5, 10, 15), []bool{true, true, true, true}, 5 * time.Millisecond},
		{"a run lost in the middle", at(0, 5, 10, 15, 20, 25), []bool{true, true, false, false, true, true}, 15 * time.Millisecond},
		{"the longest of two runs", at(0, 5, 10, 15, 20, 25, 30), []bool{true, false, true, false, false, false, true}, 20 * time.Millisecond},
		{"lost at the start", at(0, 5, 10, 15), []bool{false, false, true, true}, 10 * time.Millisecond},
		{"lost to the end", at(0, 5, 10, 15), []bool{true, false, false, false}, 15 * time.Millisecond},
		{"never answered", at(0, 5, 10), []bool{false, false, false}, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LongestGap(tt.sent, tt.acked); got != tt.want {
				t.Errorf("LongestGap = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestProberSeesAGap: the client probes two nodes' services; one is away
// for 300 ms. The prober reports a gap about that long for it, and about
// the interval for the other.
func TestProberSeesAGap(t *testing.T) {
	c := newCluster(t)
	listen := func(n *Node) *Service {
		s, err := ListenIn(n.Netns, "0.0.0.0:8080")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	steady, flaky := listen(c.Nodes[0]), listen(c.Nodes[1])
	defer steady.Stop()
	targets := []netip.AddrPort{
		netip.AddrPortFrom(c.Nodes[0].Addr4, 8080),
		netip.AddrPortFrom(c.Nodes[1].Addr4, 8080),
	}
	p := c.NewProber(targets, 10*time.Millisecond, time.Minute)
	p.Start()
	wait.For(t, "both services answering", p.Answered)
	flaky.Stop()
	time.Sleep(300 * time.Millisecond)
	flaky = listen(c.Nodes[1])
	defer flaky.Stop()
	wait.For(t, "both services answering again", p.Answered)
	gaps := p.Stop()
	// A connect refused is unanswered at once; the machine's load can
	// stretch the steady target's gaps, not shorten the flaky one's.
	if gaps[0] >= 300*time.Millisecond {
		t.Errorf("the steady target's longest gap %v, want about the 10 ms interval", gaps[0])
	}
	if gaps[1] < 300*time.Millisecond {
		t.Errorf("the flaky target's longest gap %v, want at least the 300 ms it was away", gaps[1])
	}
}
