package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ipfailover/ipfailover/config"
	"github.com/ipfailover/ipfailover/internal/membership"
)

// errUnhealthy is status's answer when the fleet is not whole: a VIP held
// twice or by no pod, a pod unreachable or not ready, a peer not heard.
var errUnhealthy = errors.New("the fleet is not whole")

// statusTimeout bounds the whole look at the fleet.
const statusTimeout = 10 * time.Second

// podStatus is one pod as its own metrics port tells it.
type podStatus struct {
	pod  string
	addr netip.Addr
	err  error
	// ready is /readyz's answer.
	ready bool
	// holds are the VIPs on its node's interface.
	holds []netip.Addr
	// adverts is what its keepalived speaks ("vrrp3 0.2s").
	adverts string
	// check is "passes", "fails" or "" (no built-in check).
	check string
	// heard and silent are the peers it hears and those it does not.
	heard, silent []netip.Addr
	// duplicates are its VIPs that another host answers for too.
	duplicates []netip.Addr
}

// status prints the fleet at a glance: each VIP and the pods that hold it
// (two: a split brain; none: no node can hold it), and each pod with what
// its keepalived speaks, its check, the VIPs it holds and the peers whose
// VRRP it hears, each read from that pod's own metrics port. It needs the
// peers from the pods (the API server lists the pods) and the metrics port.
// It ends in errUnhealthy when something is not whole, so that a script
// can test it.
func status(ctx context.Context, w io.Writer) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if !cfg.PeersFromPods {
		return fmt.Errorf("ipfailover status lists the pods of the workload: it needs OPENSHIFT_HA_UNICAST_PEERS_FROM=pods")
	}
	_, port, err := net.SplitHostPort(cfg.MetricsAddress)
	if err != nil || port == "" {
		return fmt.Errorf("ipfailover status reads each pod's metrics port, and OPENSHIFT_HA_METRICS_ADDRESS=%q turns it off", cfg.MetricsAddress)
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	view, what, err := lookAtPods(ctx, cfg)
	if err != nil {
		return err
	}
	pods := lookAtEach(ctx, view, port)
	fmt.Fprintf(w, "%s:\n\n", what)
	if !printStatus(w, cfg, pods) {
		return errUnhealthy
	}
	return nil
}

// lookAtEach reads every pod of view that publishes an address, at once.
func lookAtEach(ctx context.Context, view membership.View, port string) []podStatus {
	var out []podStatus
	for _, m := range view.Members {
		if len(m.Addrs) == 0 {
			out = append(out, podStatus{pod: m.Pod, err: errors.New("publishes no address: starting, or not this image")})
			continue
		}
		out = append(out, podStatus{pod: m.Pod, addr: m.Addrs[0]})
	}
	client := &http.Client{Timeout: statusTimeout / 2}
	var wg sync.WaitGroup
	for i := range out {
		if out[i].err != nil {
			continue
		}
		wg.Go(func() { out[i].read(ctx, client, port) })
	}
	wg.Wait()
	return out
}

// read fills s from the pod's /readyz and /metrics.
func (s *podStatus) read(ctx context.Context, client *http.Client, port string) {
	base := "http://" + net.JoinHostPort(s.addr.String(), port)
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, http.NoBody)
		if err != nil {
			return nil, err
		}
		return client.Do(req)
	}
	resp, err := get("/readyz")
	if err != nil {
		s.err = err
		return
	}
	resp.Body.Close()
	s.ready = resp.StatusCode == http.StatusOK
	resp, err = get("/metrics")
	if err != nil {
		s.err = err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.err = fmt.Errorf("/metrics: %s", resp.Status)
		return
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		s.err = fmt.Errorf("/metrics: %w", err)
		return
	}
	s.fill(families)
}

// fill reads what status shows from a pod's metrics.
func (s *podStatus) fill(families map[string]*dto.MetricFamily) {
	each := func(name string, fn func(labels map[string]string, value float64)) {
		f := families[name]
		if f == nil {
			return
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			fn(labels, v)
		}
	}
	addr := func(s string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(s)
		return a, err == nil
	}
	each("ipfailover_vip_held", func(l map[string]string, v float64) {
		if a, ok := addr(l["vip"]); ok && v == 1 {
			s.holds = append(s.holds, a)
		}
	})
	each("ipfailover_vip_duplicate", func(l map[string]string, v float64) {
		if a, ok := addr(l["vip"]); ok && v == 1 && !slices.Contains(s.duplicates, a) {
			s.duplicates = append(s.duplicates, a)
		}
	})
	each("ipfailover_peer_heard", func(l map[string]string, v float64) {
		if a, ok := addr(l["peer"]); ok {
			if v == 1 {
				s.heard = append(s.heard, a)
			} else {
				s.silent = append(s.silent, a)
			}
		}
	})
	each("ipfailover_check_up", func(_ map[string]string, v float64) {
		s.check = "fails"
		if v == 1 {
			s.check = "passes"
		}
	})
	var interval float64
	version := 0
	each("ipfailover_advert_interval_seconds", func(_ map[string]string, v float64) { interval = v })
	each("ipfailover_vrrp_version", func(_ map[string]string, v float64) { version = int(v) })
	if version != 0 {
		s.adverts = fmt.Sprintf("vrrp%d %ss", version, strconv.FormatFloat(interval, 'f', -1, 64))
	}
	for _, as := range [][]netip.Addr{s.holds, s.duplicates, s.heard, s.silent} {
		slices.SortFunc(as, netip.Addr.Compare)
	}
}

// printStatus prints the VIPs and the pods; it reports whether the fleet
// is whole.
func printStatus(w io.Writer, cfg *config.Config, pods []podStatus) bool {
	whole := true
	var problems []string
	byAddr := map[netip.Addr]string{}
	for _, p := range pods {
		if p.addr.IsValid() {
			byAddr[p.addr] = p.pod
		}
	}
	name := func(a netip.Addr) string {
		if pod, ok := byAddr[a]; ok {
			return pod
		}
		return a.String()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VIP\tHELD BY\t")
	for _, v := range cfg.VIPs {
		var by []string
		for _, p := range pods {
			if slices.Contains(p.holds, v) {
				by = append(by, p.pod)
			}
		}
		note := ""
		switch {
		case len(by) == 0:
			note = "NO HOLDER"
			problems = append(problems, v.String()+" has no holder: no pod's check passes, or no pod runs")
		case len(by) > 1:
			note = "HELD TWICE"
			problems = append(problems, fmt.Sprintf("%s is held by %d pods: they do not hear each other's VRRP", v, len(by)))
		}
		if len(by) == 0 {
			by = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v, strings.Join(by, ", "), note)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tADDRESS\tREADY\tADVERTS\tCHECK\tHOLDS\tHEARS")
	for _, p := range pods {
		if p.err != nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t%v\n", p.pod, addrOrDash(p.addr), p.err)
			problems = append(problems, fmt.Sprintf("%s: %v", p.pod, p.err))
			continue
		}
		hears := make([]string, 0, len(p.heard)+len(p.silent))
		for _, a := range p.heard {
			hears = append(hears, name(a))
		}
		for _, a := range p.silent {
			hears = append(hears, "NOT "+name(a))
			problems = append(problems, fmt.Sprintf("%s does not hear %s's VRRP: IP protocol 112 is dropped between them", p.pod, name(a)))
		}
		if len(hears) == 0 {
			hears = []string{"-"}
		}
		ready := "yes"
		if !p.ready {
			ready = "no"
			problems = append(problems, p.pod+" is not ready")
		}
		holds := "-"
		if len(p.holds) > 0 {
			holds = addrList(p.holds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.pod, p.addr, ready, orDash(p.adverts), orDash(p.check), holds, strings.Join(hears, ", "))
	}
	tw.Flush()
	if len(problems) > 0 {
		whole = false
		fmt.Fprintln(w)
		for _, p := range problems {
			fmt.Fprintln(w, "! "+p)
		}
	}
	return whole
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func addrOrDash(a netip.Addr) string {
	if !a.IsValid() {
		return "-"
	}
	return a.String()
}
