package keepalived

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Conf is what shapes failover in a keepalived.conf: the advert and check
// intervals and, per vrrp_instance, its router id, priority, start state
// and VIPs.
type Conf struct {
	// AdvertInt is advert_int (1 s when the file does not set it).
	AdvertInt time.Duration
	// V3 is vrrp_version 3: the skew then scales with the advert interval.
	V3 bool
	// CheckInterval is the vrrp_script's interval (0 for a track_file).
	CheckInterval time.Duration
	// CheckFile is the track_file's file: ipfailover's built-in check.
	CheckFile string
	Instances []ConfInstance
}

// ConfInstance is one vrrp_instance of a Conf.
type ConfInstance struct {
	Name     string
	RouterID int
	Priority int
	Master   bool // "state MASTER"
	VIPs     []netip.Addr
	// UnicastPeers is the unicast_peer list.
	UnicastPeers []netip.Addr
}

// Parse reads a keepalived.conf as ipfailover renders it (and as the shipped
// image writes it): one keyword, or keyword and value, per line, braces at
// line ends.
func Parse(text []byte) (*Conf, error) {
	c := &Conf{AdvertInt: time.Second}
	var cur *ConfInstance
	inVIPs, inPeers := false, false
	sc := bufio.NewScanner(bytes.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "!") || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func(err error) error { return fmt.Errorf("keepalived.conf line %d %q: %w", line, sc.Text(), err) }
		switch {
		case inPeers && f[0] == "}":
			inPeers = false
		case inPeers:
			a, err := netip.ParseAddr(f[0])
			if err != nil {
				return nil, bad(err)
			}
			cur.UnicastPeers = append(cur.UnicastPeers, a)
		case inVIPs && f[0] == "}":
			inVIPs = false
		case inVIPs:
			a, err := netip.ParseAddr(strings.SplitN(f[0], "/", 2)[0])
			if err != nil {
				return nil, bad(err)
			}
			cur.VIPs = append(cur.VIPs, a)
		case f[0] == "vrrp_instance" && len(f) >= 2:
			c.Instances = append(c.Instances, ConfInstance{Name: f[1]})
			cur = &c.Instances[len(c.Instances)-1]
		case f[0] == "vrrp_version" && len(f) >= 2:
			c.V3 = f[1] == "3"
		case f[0] == "interval" && len(f) >= 2 && cur == nil:
			d, err := seconds(f[1])
			if err != nil {
				return nil, bad(err)
			}
			c.CheckInterval = d
		case f[0] == "file" && len(f) >= 2 && cur == nil:
			c.CheckFile = f[1]
		case cur == nil:
		case f[0] == "state" && len(f) >= 2:
			cur.Master = f[1] == "MASTER"
		case f[0] == "virtual_router_id" && len(f) >= 2:
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, bad(err)
			}
			cur.RouterID = n
		case f[0] == "priority" && len(f) >= 2:
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, bad(err)
			}
			cur.Priority = n
		case f[0] == "advert_int" && len(f) >= 2:
			d, err := seconds(f[1])
			if err != nil {
				return nil, bad(err)
			}
			c.AdvertInt = d
		case f[0] == "virtual_ipaddress":
			inVIPs = true
		case f[0] == "unicast_peer":
			inPeers = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(c.Instances) == 0 {
		return nil, fmt.Errorf("keepalived.conf has no vrrp_instance")
	}
	return c, nil
}

func seconds(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("not a number of seconds: %q", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// Instance returns the instance called name, or nil.
func (c *Conf) Instance(name string) *ConfInstance {
	for i := range c.Instances {
		if c.Instances[i].Name == name {
			return &c.Instances[i]
		}
	}
	return nil
}

// InstanceOf returns the instance that carries vip, or nil.
func (c *Conf) InstanceOf(vip netip.Addr) *ConfInstance {
	for i := range c.Instances {
		for _, v := range c.Instances[i].VIPs {
			if v == vip {
				return &c.Instances[i]
			}
		}
	}
	return nil
}

// Skew is keepalived's skew time for a backup at priority p:
// (256-p)/256 of a second with VRRPv2, of the advert interval with VRRPv3.
func (c *Conf) Skew(p int) time.Duration {
	base := time.Second
	if c.V3 {
		base = c.AdvertInt
	}
	return time.Duration(int64(256-p) * int64(base) / 256)
}

// MasterDown is the master-down interval of a backup at priority p:
// 3 adverts plus the skew.
func (c *Conf) MasterDown(p int) time.Duration {
	return 3*c.AdvertInt + c.Skew(p)
}
