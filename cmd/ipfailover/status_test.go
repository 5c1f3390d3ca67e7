package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ipfailover/ipfailover/config"
)

// metricsOf is a pod's /metrics as status reads it.
func metricsOf(t *testing.T, held, heard, silent string) podStatus {
	t.Helper()
	var b strings.Builder
	b.WriteString("# TYPE ipfailover_vip_held gauge\n")
	for _, v := range []string{"192.0.2.100", "192.0.2.101"} {
		on := "0"
		if strings.Contains(held, v) {
			on = "1"
		}
		b.WriteString(`ipfailover_vip_held{vip="` + v + `",instance="X",intf="eth0"} ` + on + "\n")
	}
	b.WriteString("# TYPE ipfailover_peer_heard gauge\n")
	for _, p := range strings.Fields(heard) {
		b.WriteString(`ipfailover_peer_heard{peer="` + p + `"} 1` + "\n")
	}
	for _, p := range strings.Fields(silent) {
		b.WriteString(`ipfailover_peer_heard{peer="` + p + `"} 0` + "\n")
	}
	b.WriteString("# TYPE ipfailover_check_up gauge\nipfailover_check_up 1\n")
	b.WriteString("# TYPE ipfailover_advert_interval_seconds gauge\nipfailover_advert_interval_seconds 0.2\n")
	b.WriteString("# TYPE ipfailover_vrrp_version gauge\nipfailover_vrrp_version 3\n")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	var s podStatus
	s.fill(families)
	s.ready = true
	return s
}

// TestStatus: a VIP held by two pods and a peer not heard are shown and
// named below the tables, and the fleet is not whole; one holder per VIP
// and every peer heard is whole.
func TestStatus(t *testing.T) {
	cfg, err := config.Parse(config.Raw{VirtualIPs: "192.0.2.100-101", PeersFrom: "pods", PodName: "a"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")
	pod := func(name string, addr netip.Addr, s podStatus) podStatus {
		s.pod, s.addr = name, addr
		return s
	}
	split := []podStatus{
		pod("ipfailover-a", a, metricsOf(t, "192.0.2.100", "", "192.0.2.12")),
		pod("ipfailover-b", b, metricsOf(t, "192.0.2.100 192.0.2.101", "192.0.2.11", "")),
	}
	var out bytes.Buffer
	if printStatus(&out, cfg, split) {
		t.Error("a split fleet is whole")
	}
	want := `VIP          HELD BY                     
192.0.2.100  ipfailover-a, ipfailover-b  HELD TWICE
192.0.2.101  ipfailover-b                

POD           ADDRESS     READY  ADVERTS     CHECK   HOLDS                    HEARS
ipfailover-a  192.0.2.11  yes    vrrp3 0.2s  passes  192.0.2.100              NOT ipfailover-b
ipfailover-b  192.0.2.12  yes    vrrp3 0.2s  passes  192.0.2.100,192.0.2.101  ipfailover-a

! 192.0.2.100 is held by 2 pods: they do not hear each other's VRRP
! ipfailover-a does not hear ipfailover-b's VRRP: IP protocol 112 is dropped between them
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	whole := []podStatus{
		pod("ipfailover-a", a, metricsOf(t, "192.0.2.100", "192.0.2.12", "")),
		pod("ipfailover-b", b, metricsOf(t, "192.0.2.101", "192.0.2.11", "")),
	}
	out.Reset()
	if !printStatus(&out, cfg, whole) {
		t.Errorf("a whole fleet is not:\n%s", out.String())
	}
}
