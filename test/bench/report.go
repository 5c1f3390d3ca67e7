package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Unit says how a row's numbers read.
type Unit string

// Units of the rows.
const (
	Seconds Unit = "s"
	MB      Unit = "MB"
	KB      Unit = "kB"
	// DecimalMB is 10^6 bytes, as podman prints image sizes.
	DecimalMB Unit = "MB (10^6 B)"
	// Percent is of one CPU.
	Percent Unit = "%"
	// TimeShare is a share of a span of time, in percent.
	TimeShare Unit = "% of the time"
	// PacketRate is packets per second.
	PacketRate Unit = "packets/s"
)

// Row is one line of the table: the median and the worst of the samples,
// the VRRP limit where one applies and the shipped image's figure.
type Row struct {
	Name string `json:"name"`
	Unit Unit   `json:"unit"`
	N    int    `json:"n"`
	// Median and Worst are in Unit. P99 is set for rows of many samples.
	Median float64  `json:"median"`
	P99    *float64 `json:"p99,omitempty"`
	Worst  float64  `json:"worst"`
	// Limit is the median of the samples' VRRP limits (0: none applies);
	// Ratio is Median/Limit and WorstRatio the largest value/limit of one
	// sample.
	Limit      float64 `json:"limit,omitempty"`
	LimitRule  string  `json:"limit_rule,omitempty"`
	Ratio      float64 `json:"ratio,omitempty"`
	WorstRatio float64 `json:"worst_ratio,omitempty"`
	// Target is the figure the issue asks the row to stay under (0: none).
	Target float64 `json:"target,omitempty"`
	// TargetOn says which figure Target is compared with: "median",
	// "worst" or "p99".
	TargetOn string `json:"target_on,omitempty"`
	// WorstTarget, when set, is a second target, for the worst.
	WorstTarget float64 `json:"worst_target,omitempty"`
	Pass        *bool   `json:"pass,omitempty"`
	Shipped     string  `json:"shipped,omitempty"`
	Note        string  `json:"note,omitempty"`
	// Samples are the values in Unit, for rows of up to 50 samples.
	Samples []float64 `json:"samples,omitempty"`
}

// TimeRow summarizes duration samples.
func TimeRow(name string, ss []Sample, limitRule, shipped string) Row {
	r := Row{Name: name, Unit: Seconds, N: len(ss), LimitRule: limitRule, Shipped: shipped}
	if len(ss) == 0 {
		return r
	}
	vs := values(ss)
	if len(vs) <= 50 {
		for _, v := range vs {
			r.Samples = append(r.Samples, v.Seconds())
		}
	}
	r.Median = Median(vs).Seconds()
	r.Worst = Worst(vs).Seconds()
	if len(ss) >= 20 {
		p := Quantile(vs, 0.99).Seconds()
		r.P99 = &p
	}
	if ls := limits(ss); len(ls) > 0 {
		r.Limit = Median(ls).Seconds()
		if r.Limit > 0 {
			r.Ratio = r.Median / r.Limit
		}
		for _, s := range ss {
			if s.Limit > 0 {
				r.WorstRatio = max(r.WorstRatio, float64(s.Value)/float64(s.Limit))
			}
		}
	}
	return r
}

// SizeRow summarizes byte counts in unit u (MB or kB, powers of 1024 as
// /proc reports them).
func SizeRow(name string, u Unit, bytes []int64, shipped string) Row {
	r := Row{Name: name, Unit: u, N: len(bytes), Shipped: shipped}
	if len(bytes) == 0 {
		return r
	}
	div := 1024.0
	if u == MB {
		div = 1024 * 1024
	}
	fs := make([]float64, len(bytes))
	for i, b := range bytes {
		fs[i] = float64(b) / div
	}
	return r.summarize(fs)
}

// summarize sets Samples, Median and Worst from vs, not empty.
func (r Row) summarize(vs []float64) Row {
	r.Samples = slices.Clone(vs)
	sorted := slices.Sorted(slices.Values(vs))
	r.Median, r.Worst = sortedMedian(sorted), sorted[len(sorted)-1]
	return r
}

// Check sets Target and Pass: the figure named by on must stay under
// target (in the row's unit).
func (r *Row) Check(on string, target float64) {
	r.Target, r.TargetOn = target, on
	v := r.Median
	switch on {
	case "worst":
		v = r.Worst
	case "p99":
		if r.P99 != nil {
			v = *r.P99
		}
	}
	pass := r.N > 0 && v < target
	r.Pass = &pass
}

// CheckWorst adds a second target: the worst must stay under target too.
func (r *Row) CheckWorst(target float64) {
	r.WorstTarget = target
	pass := r.N > 0 && r.Worst < target && (r.Pass == nil || *r.Pass)
	r.Pass = &pass
}

// PercentRow summarizes percentages of one CPU.
func PercentRow(name string, vs []float64, note string) Row {
	r := Row{Name: name, Unit: Percent, N: len(vs), Note: note}
	if len(vs) == 0 {
		return r
	}
	return r.summarize(vs)
}

// ShareRow summarizes shares of time, in percent (the worst is the
// largest).
func ShareRow(name string, vs []float64, note string) Row {
	r := Row{Name: name, Unit: TimeShare, N: len(vs), Note: note}
	if len(vs) == 0 {
		return r
	}
	return r.summarize(vs)
}

// Report is one run of the bench.
type Report struct {
	Commit   string    `json:"commit"`
	Dirty    bool      `json:"dirty"`
	Date     time.Time `json:"date"`
	Host     string    `json:"host"`
	Kernel   string    `json:"kernel"`
	CPU      string    `json:"cpu"`
	CPUs     int       `json:"cpus"`
	Go       string    `json:"go"`
	Keepaliv string    `json:"keepalived"`
	Rounds   int       `json:"rounds"`
	// PollInterval is the asked interval between netlink dumps;
	// Resolution the longest gap between two dumps seen while timing a
	// failover.
	PollInterval float64  `json:"poll_interval_s"`
	Resolution   float64  `json:"resolution_s"`
	Elapsed      float64  `json:"elapsed_s"`
	Rows         []Row    `json:"rows"`
	Notes        []string `json:"notes,omitempty"`
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable prints the table.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "row\tn\tmedian\tp99\tworst\tVRRP limit\tmedian/limit\tworst/limit\ttarget\tshipped image\t")
	for _, r := range rep.Rows {
		p99 := ""
		if r.P99 != nil {
			p99 = format(*r.P99, r.Unit)
		}
		limit, ratio, wratio := "", "", ""
		if r.Limit > 0 {
			limit = format(r.Limit, r.Unit)
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
			wratio = fmt.Sprintf("%.2fx", r.WorstRatio)
		}
		target := ""
		if r.Pass != nil {
			mark := "ok"
			if !*r.Pass {
				mark = "MISS"
			}
			target = fmt.Sprintf("%s < %s", r.TargetOn, format(r.Target, r.Unit))
			if r.WorstTarget > 0 {
				target += fmt.Sprintf(", worst < %s", format(r.WorstTarget, r.Unit))
			}
			target += " " + mark
		}
		med, worst := "-", "-"
		if r.N > 0 {
			med, worst = format(r.Median, r.Unit), format(r.Worst, r.Unit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.N, med, p99, worst, limit, ratio, wratio, target, r.Shipped)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ncommit %s%s, %s, %d rounds, %s, %d CPUs, kernel %s, %s\n",
		rep.Commit, map[bool]string{true: " (dirty)"}[rep.Dirty], rep.Date.Format(time.RFC3339), rep.Rounds, rep.Keepaliv, rep.CPUs, rep.Kernel, rep.Go)
	fmt.Fprintf(w, "VIP times: netlink address dumps of every node every %s from the action; resolution %s (the longest gap between the last dump without the move and the first with it)\n",
		format(rep.PollInterval, Seconds), format(rep.Resolution, Seconds))
	for _, r := range rep.Rows {
		if r.LimitRule != "" || r.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, strings.TrimPrefix(strings.Join(nonEmpty("limit "+r.LimitRule, r.Note), "; "), "limit ; "))
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// WriteMarkdown writes the table the README shows: each row's median,
// worst, VRRP limit and the shipped image's figure, then the version and
// machine it was measured on.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| row | median | worst | VRRP limit | shipped image |\n|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		med, worst, limit := "-", "-", ""
		if r.N > 0 {
			med, worst = format(r.Median, r.Unit), format(r.Worst, r.Unit)
		}
		if r.Limit > 0 {
			limit = format(r.Limit, r.Unit)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Name, med, worst, limit, r.Shipped)
	}
	dirty := ""
	if rep.Dirty {
		dirty = " (with uncommitted changes)"
	}
	fmt.Fprintf(&b, "\nMeasured by `make bench` at commit %s%s on %s: %d rounds; %d CPUs (%s), Linux %s, %s, %s.\n",
		rep.Commit, dirty, rep.Date.Format("2006-01-02"), rep.Rounds, rep.CPUs, rep.CPU, rep.Kernel, rep.Keepaliv, rep.Go)
	_, err := io.WriteString(w, b.String())
	return err
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && s != "limit " {
			out = append(out, s)
		}
	}
	return out
}

// format prints seconds as ms below one second, sizes with one decimal.
func format(v float64, u Unit) string {
	switch u {
	case Seconds:
		if math.Abs(v) < 1 {
			return fmt.Sprintf("%.1f ms", v*1000)
		}
		return fmt.Sprintf("%.3f s", v)
	case Percent, TimeShare:
		return fmt.Sprintf("%.3f %%", v)
	case DecimalMB:
		return fmt.Sprintf("%.1f MB", v)
	case PacketRate:
		return fmt.Sprintf("%.0f packets/s", v)
	default:
		return fmt.Sprintf("%.1f %s", v, u)
	}
}
