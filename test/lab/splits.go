package lab

import (
	"net/netip"
	"sync"
	"time"
)

// SplitMeter reads the holders of some VIPs every interval and adds up,
// per VIP, the time they show it on several nodes at once: the witness of
// "never a VIP on two nodes" at the interval's resolution.
type SplitMeter struct {
	done chan struct{}
	wg   sync.WaitGroup

	total, longest map[netip.Addr]time.Duration
}

// MeterSplits starts a SplitMeter on vips; changed, when set, is called
// with every new holder map, for a log.
func (c *Cluster) MeterSplits(vips []netip.Addr, every time.Duration, changed func(HolderMap)) *SplitMeter {
	m := &SplitMeter{done: make(chan struct{}), total: map[netip.Addr]time.Duration{}, longest: map[netip.Addr]time.Duration{}}
	m.wg.Go(func() {
		var prev map[netip.Addr][]*Node
		var prevAt time.Time
		var prevKey string
		stretch := map[netip.Addr]time.Duration{}
		for {
			hs, err := c.HoldersOf(vips)
			now := time.Now()
			if err == nil {
				if changed != nil {
					hm := HolderMap{}
					for _, v := range vips {
						if len(hs[v]) == 1 {
							hm[v] = hs[v][0]
						}
					}
					if key := splitKey(vips, hs); key != prevKey {
						changed(hm)
						prevKey = key
					}
				}
				if prev != nil {
					d := now.Sub(prevAt)
					for _, v := range vips {
						if len(prev[v]) > 1 {
							m.total[v] += d
							stretch[v] += d
							m.longest[v] = max(m.longest[v], stretch[v])
						} else {
							stretch[v] = 0
						}
					}
				}
				prev, prevAt = hs, now
			}
			select {
			case <-m.done:
				return
			case <-time.After(every):
			}
		}
	})
	return m
}

// Stop ends the sampling and returns each VIP's total time, and its
// longest stretch, on several nodes.
func (m *SplitMeter) Stop() (total, longest map[netip.Addr]time.Duration) {
	close(m.done)
	m.wg.Wait()
	return m.total, m.longest
}

func splitKey(vips []netip.Addr, hs map[netip.Addr][]*Node) string {
	var b []byte
	for _, v := range vips {
		b = append(b, v.String()...)
		b = append(b, '=')
		for _, n := range hs[v] {
			b = append(b, n.Name...)
			b = append(b, ',')
		}
		b = append(b, ' ')
	}
	return string(b)
}
