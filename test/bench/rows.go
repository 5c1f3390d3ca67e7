package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ipfailover/ipfailover/internal/check"
)

// rows turns the samples into the table, in the order users meet them.
func (r *runner) rows() []Row {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rows []Row
	t := func(name, rule, shipped string) *Row {
		rows = append(rows, TimeRow(name, r.samples[name], rule, shipped))
		return &rows[len(rows)-1]
	}
	size := func(name string, u Unit, shipped string) *Row {
		rows = append(rows, SizeRow(name, u, r.sizes[name], shipped))
		return &rows[len(rows)-1]
	}

	t(rowGraceful, "the best backup's skew (256-priority)/256 s", shippedGraceful).Check("median", targetGraceful)
	chk := t(rowCheck, fmt.Sprintf("check period + %d × %s (%d failures in a row) + the best backup's skew", check.Fall-1, check.Retry, check.Fall), shippedCheck)
	chk.Check("median", targetCheck)
	chk.CheckWorst(targetCheckWorst)
	t(rowCheckScript, "check interval + the best backup's skew", shippedCheck).Note = "the shipped image's check, bash's /dev/tcp run by keepalived, at its default interval, in the same run"
	crash := t(rowCrash, "3 × advert_int + the best backup's skew", shippedCrash)
	r.crashBound(crash, r.samples[rowCrash])
	fast := t(rowCrashFast, "3 × 0.1 s + the best backup's skew (VRRPv3: scaled by advert_int)", "")
	r.crashBound(fast, r.samples[rowCrashFast])
	conv := "until every VIP has had the same single holder for 1.5 advert intervals; limit: from the start of the fleet to the top node's instances entering BACKUP (keepalived's line, as it arrives), + 3 × advert_int + its skew"
	t(rowConverge, "top node in BACKUP + 3 × advert_int + its skew", shippedConverge).Note = conv
	t(rowConverge+splitSuffix, "", "").Note = "time, by the dumps, in which some VIP was on two nodes during a first convergence"
	t(rowConvFast, "top node in BACKUP + 3 × 0.1 s + its skew", "")
	t(rowConvFast+splitSuffix, "", "")
	cfg := t(rowConfig, "", "")
	cfg.Note = fmt.Sprintf("polled /proc every 0.2 ms, resolution %s", r.startRes.Round(time.Microsecond))
	t(rowKeepalived, "", shippedStartup).Check("median", targetStartup)
	t(rowScrape, "", shippedScrape).Check("median", targetScrape)
	rows[len(rows)-1].Note = fmt.Sprintf("%d concurrent scrapers, kept-alive connections, from the client namespace", Scrapers)
	size(rowScrapeSize, KB, "")
	size(rowBinary, MB, "").Note = "the static, stripped binary the bench runs (client-go's informers, for OPENSHIFT_HA_UNICAST_PEERS_FROM=pods, are 6 MB of it)"
	size(rowRSSRest, MB, shippedRSS).Check("median", targetRSS)
	size(rowRSSScrape, MB, shippedRSS).Check("worst", targetRSS)
	rows = append(rows, r.floodRows()...)
	for _, name := range []string{rowCPU1 + builtinSuffix, rowCPU1 + scriptSuffix, rowCPU254 + builtinSuffix, rowCPU254 + scriptSuffix} {
		if ss, ok := r.cpu[name]; ok {
			rows = append(rows, cpuRow(name, ss, r.o.CPUFor), rssRow(name, ss))
		}
	}
	rows = append(rows, r.advertRows()...)
	rows = append(rows, r.rolloutRows()...)
	rows = append(rows, r.migrateRows()...)
	rows = append(rows, r.partitionRows()...)
	if len(r.samples[rowRender]) > 0 || len(r.samples[rowScaleConv]) > 0 {
		t(rowRender, "", "")
		rows[len(rows)-1].Note = "wall time of `ipfailover render` in a node (process start included)"
		t(rowScaleConv, "top node in BACKUP + 3 × advert_int + its skew", "")
		t(rowScaleConv+splitSuffix, "", "")
		t(rowScaleScrape, "", "")
		size(rowScaleSize, KB, "")
		size(rowScaleRSS, MB, "")
		size(rowScaleRSSPk, MB, "")
	}
	rows = append(rows, r.scale10RowsOf()...)
	if len(r.samples[rowKubeUp]) > 0 {
		r.kubeRows(t, size)
	}
	return rows
}

// kubeRows are the rows of the real cluster: the handover gaps with the
// issue's target on the worst, the node death against VRRP's limit, and
// what the cluster costs.
func (r *runner) kubeRows(t func(name, rule, shipped string) *Row, size func(name string, u Unit, shipped string) *Row) {
	probe := fmt.Sprintf("a client connects to every VIP every %s (TCP to the monitored port, a service on every node)", kubeProbe)
	t(rowKubeUp, "", "").Note = "kube.Up: namespaces, certificates, control plane, three nodes Ready, the image saved and imported into each"
	t(rowKubeImport, "", "").Note = "ctr images import of the pause image and make image's, per node"
	size(rowKubeCP, MB, "").Note = "sum of the processes' resident memory, the Deployment running"
	size(rowKubeNode, MB, "").Note = "per node, every process of the node's cgroup"
	for _, name := range []string{rowKubeRollout, rowKubeDelete, rowKubeDrain, rowKubeRolloutDS} {
		row := t(name, "", "")
		row.Note = probe + "; until the holders settle again"
		row.Check("worst", targetRolling)
	}
	death := t(rowKubeDeath, "3 × advert_int + the best backup's skew", shippedCrash)
	death.Note = "the node's every process frozen and killed, its link cut, at a random moment of the advert interval; timed by netlink as the crash rows"
	r.crashBound(death, r.samples[rowKubeDeath])
	r.membershipRows(t, size)
}

// crashBound checks the bound: no crash move beyond 3 × advert_int
// + the best backup's skew + 0.1 s.
func (r *runner) crashBound(row *Row, ss []Sample) {
	if len(ss) == 0 {
		return
	}
	worst := math.Inf(-1)
	for _, s := range ss {
		worst = max(worst, (s.Value - s.Limit - crashBoundMargin).Seconds())
	}
	pass := worst < 0
	row.Pass = &pass
	row.TargetOn = "worst"
	row.Target = row.Limit + crashBoundMargin.Seconds()
}

// cpuRow is a node's whole CPU use (entrypoint and keepalived with its
// scripts); the note splits the medians.
func cpuRow(name string, ss []cpuSample, window time.Duration) Row {
	var total, entry, ka []float64
	for _, s := range ss {
		total = append(total, s.entrypoint+s.keepalived)
		entry = append(entry, s.entrypoint)
		ka = append(ka, s.keepalived)
	}
	note := fmt.Sprintf("entrypoint %.3f %%, keepalived and its scripts %.3f %% (medians over %s, cgroup v2 usage_usec)",
		PercentRow("", entry, "").Median, PercentRow("", ka, "").Median, window)
	return PercentRow(name, total, note)
}

// rssRow is a node's resident memory in a CPU case (entrypoint and
// keepalived's processes), named after the CPU row; the note splits the
// medians and gives the worst sum of the processes' peaks.
func rssRow(cpuName string, ss []cpuSample) Row {
	var total, entry, ka, peak []int64
	for _, s := range ss {
		total = append(total, s.entrypointRSS+s.keepalivedRSS)
		entry = append(entry, s.entrypointRSS)
		ka = append(ka, s.keepalivedRSS)
		peak = append(peak, s.peakRSS)
	}
	row := SizeRow(strings.Replace(cpuName, "CPU", "RSS", 1), MB, total, "")
	row.Note = fmt.Sprintf("entrypoint %.1f MB, keepalived's processes %.1f MB (medians, VmRSS at the end of the window); sum of their peaks (VmHWM) %.1f MB at worst",
		SizeRow("", MB, entry, "").Median, SizeRow("", MB, ka, "").Median, SizeRow("", MB, peak, "").Worst)
	return row
}
