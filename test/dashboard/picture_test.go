package dashboard

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipfailover/ipfailover/test/glyph"
)

// picturePath is where -picture writes the dashboard's main panels, drawn
// from a run's series.
const picturePath = "../../docs/dashboard.svg"

// pictured are the panels the picture shows, in order, two to a row: what
// an operator looks at first during a failover.
var pictured = []string{
	"Holder of each VIP",
	"Nodes holding each VIP",
	"VIP moves by cause",
	"Takeover times",
	"Check passing",
	"Check probe time",
	"Peers heard",
	"Another host answers for a VIP",
	"Foreign VRRP adverts",
	"Split-brain guard actions",
}

// Layout of the picture, in pixels; titles are drawn at scale 2 (12
// pixels a character, 14 high), the rest at scale 1. Every panel plots the
// run over the same columns of its half, so that a moment is at the same
// place in all of them.
const (
	picWidth     = 1800
	picMargin    = 20
	panelGap     = 20
	panelWidth   = (picWidth - 2*picMargin - panelGap) / 2
	labelWidth   = 190 // a state timeline's row labels, a graph's y axis
	plotRight    = 12
	rowHeight    = 20
	plotHeight   = 150
	legendLine   = 12
	axisHeight   = 22
	titleHeight  = 26
	eventsHeight = 12
	keyLine      = 20
	textScale    = 2
)

// Colours of the picture; Grafana's named colours as its default theme
// about draws them.
var (
	white  = color.RGBA{255, 255, 255, 255}
	ink    = color.RGBA{30, 30, 30, 255}
	faint  = color.RGBA{240, 240, 240, 255}
	grid   = color.RGBA{215, 215, 215, 255}
	marker = color.RGBA{150, 150, 150, 255}
	named  = map[string]color.RGBA{
		"green":  {115, 191, 105, 255},
		"red":    {242, 73, 92, 255},
		"orange": {255, 152, 48, 255},
		"blue":   {87, 148, 242, 255},
		"text":   {160, 160, 160, 255},
	}
	// palette colours a graph's series in turn, as Grafana's classic
	// palette starts.
	palette = []color.RGBA{
		{115, 191, 105, 255}, {242, 204, 12, 255}, {138, 184, 255, 255}, {255, 120, 10, 255}, {242, 73, 92, 255},
		{87, 148, 242, 255}, {184, 119, 217, 255}, {112, 93, 160, 255}, {55, 135, 45, 255}, {250, 222, 42, 255},
	}
)

// canvas is the picture and the run's time span.
type canvas struct {
	img        *image.RGBA
	start, end time.Time
	steps      []step
}

func (c *canvas) fill(r image.Rectangle, col color.Color) {
	draw.Draw(c.img, r, &image.Uniform{col}, image.Point{}, draw.Over)
}

func (c *canvas) text(x, y int, s string, scale int, col color.Color) {
	glyph.Draw(c.img, x, y, s, scale, col)
}

// xOf maps a time to a column of a plot from x0 to x1.
func (c *canvas) xOf(t time.Time, x0, x1 int) int {
	span := c.end.Sub(c.start)
	return x0 + int(float64(x1-x0)*float64(t.Sub(c.start))/float64(span))
}

// line draws a line of width 2 from (x0, y0) to (x1, y1).
func (c *canvas) line(x0, y0, x1, y1 int, col color.Color) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + (x1-x0)*i/steps
		y := y0 + (y1-y0)*i/steps
		c.fill(image.Rect(x, y, x+2, y+2), col)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// timeAxis draws the seconds of the run under a plot from x0 to x1 and a
// grid line for each from top to bottom.
func (c *canvas) timeAxis(x0, x1, top, bottom int) {
	span := c.end.Sub(c.start)
	every := 5 * time.Second
	for span/every > 12 {
		every *= 2
	}
	for t := time.Duration(0); t <= span; t += every {
		x := c.xOf(c.start.Add(t), x0, x1)
		c.fill(image.Rect(x, top, x+1, bottom), grid)
		label := fmt.Sprintf("%ds", int(t.Seconds()))
		c.text(x-glyph.Width(label, 1)/2, bottom+4, label, 1, ink)
	}
}

// events draws the steps of the run: a dashed line from top to bottom at
// each, and above top their numbers, those too close to tell apart
// joined ("1,2").
func (c *canvas) events(x0, x1, top, bottom int) {
	next := x0 - 100
	var label string
	var at int
	flush := func() {
		if label != "" {
			c.text(at, top-eventsHeight+2, label, 1, ink)
		}
	}
	for i, s := range c.steps {
		x := c.xOf(s.At, x0, x1)
		for y := top; y < bottom; y += 6 {
			c.fill(image.Rect(x, y, x+1, y+3), marker)
		}
		n := strconv.Itoa(i + 1)
		if x < next {
			label += "," + n
			next = at + glyph.Width(label, 1) + 4
			continue
		}
		flush()
		label, at = n, x-glyph.Width(n, 1)/2
		next = at + glyph.Width(label, 1) + 4
	}
	flush()
}

// legendText is what Grafana shows for a series: the legend format with
// its labels filled in.
func legendText(format string, labels map[string]string) string {
	return strings.TrimSpace(legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendLabel.FindStringSubmatch(m)[1]]
	}))
}

// writePicture draws the pictured panels of d from the run's results into
// the SVG at path: the drawing as a PNG inside it, so that the repository
// tracks text only (test/tree) and the page shows it as an image.
func writePicture(path string, d committedDashboard, results map[string][]result, steps []step, start, end time.Time) error {
	img, err := drawPanels(d, results, steps, start, end)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return err
	}
	return os.WriteFile(path, svgOf(buf.Bytes(), img.Bounds().Dx(), img.Bounds().Dy()), 0o644)
}

// svgOf is an SVG image of w by h pixels showing the PNG pic.
func svgOf(pic []byte, w, h int) []byte {
	return fmt.Appendf(nil, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">
<title>The ipfailover dashboard's main panels, drawn from a lab run</title>
<image width="%d" height="%d" href="data:image/png;base64,%s"/>
</svg>
`, w, h, w, h, w, h, base64.StdEncoding.EncodeToString(pic))
}

// drawPanels draws the pictured panels of d from the run's results.
func drawPanels(d committedDashboard, results map[string][]result, steps []step, start, end time.Time) (*image.RGBA, error) {
	panels := map[string]panel{}
	for _, p := range d.Panels {
		panels[p.Title] = p
	}
	heights := make([]int, len(pictured))
	for i, title := range pictured {
		p, ok := panels[title]
		if !ok {
			return nil, fmt.Errorf("the picture shows panel %q, which the dashboard does not have", title)
		}
		heights[i] = panelHeight(p, results[title])
	}
	keyLines := (len(steps) + 1) / 2
	height := picMargin + 36 + keyLines*keyLine + 10
	for i := 0; i < len(pictured); i += 2 {
		h := heights[i]
		if i+1 < len(pictured) {
			h = max(h, heights[i+1])
		}
		height += h + panelGap
	}
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, picWidth, height)), start: start, end: end, steps: steps}
	c.fill(c.img.Bounds(), white)
	c.text(picMargin, picMargin, fmt.Sprintf("ipfailover dashboard: a lab run of %ds, 3 nodes, 3 vips, the peers from the pods, scraped every %s", int(end.Sub(start).Seconds()), scrapeInterval), textScale, ink)
	y := picMargin + 36
	for i, s := range steps {
		x := picMargin + (i/keyLines)*(panelWidth+panelGap)
		c.text(x, y+(i%keyLines)*keyLine, fmt.Sprintf("%2d %3ds  %s", i+1, int(s.At.Sub(start).Seconds()), s.What), textScale, ink)
	}
	y += keyLines*keyLine + 10
	for i := 0; i < len(pictured); i += 2 {
		rowH := heights[i]
		for j := i; j < min(i+2, len(pictured)); j++ {
			rowH = max(rowH, heights[j])
			x := picMargin + (j-i)*(panelWidth+panelGap)
			c.panel(panels[pictured[j]], results[pictured[j]], image.Rect(x, y, x+panelWidth, y+heights[j]))
		}
		y += rowH + panelGap
	}
	return c.img, nil
}

// drawnSeries are a panel's series with their legend texts, in the order
// of its queries, then by legend.
type drawnSeries struct {
	legend string
	series
}

func seriesOfPanel(rs []result) []drawnSeries {
	var out []drawnSeries
	for _, r := range rs {
		var these []drawnSeries
		for _, s := range r.series {
			these = append(these, drawnSeries{legendText(r.target.Legend, s.Labels), s})
		}
		slices.SortStableFunc(these, func(a, b drawnSeries) int { return strings.Compare(a.legend, b.legend) })
		out = append(out, these...)
	}
	return out
}

// panelHeight is how tall panel p draws with its series.
func panelHeight(p panel, rs []result) int {
	n := len(seriesOfPanel(rs))
	if p.Type == "state-timeline" {
		return titleHeight + eventsHeight + max(n, 1)*rowHeight + axisHeight
	}
	return titleHeight + eventsHeight + plotHeight + axisHeight + legendRows(seriesOfPanel(rs))*legendLine + 6
}

// legendRows is how many lines a graph's legend takes, two entries a
// line.
func legendRows(ss []drawnSeries) int { return (len(ss) + 1) / 2 }

// panel draws one panel in r.
func (c *canvas) panel(p panel, rs []result, r image.Rectangle) {
	c.fill(r, faint)
	c.text(r.Min.X+8, r.Min.Y+7, p.Title, textScale, ink)
	ss := seriesOfPanel(rs)
	if p.Type == "state-timeline" {
		c.timeline(p, ss, r)
		return
	}
	c.graph(p, ss, r)
}

// colourOf is the mapping of value v in a state timeline: its text and
// colour, and whether one applies.
func colourOf(ms []mapping, v float64) (string, color.RGBA, bool) {
	for _, m := range ms {
		match := m.from != nil && v >= *m.from
		if m.from == nil {
			f, err := strconv.ParseFloat(m.value, 64)
			match = err == nil && f == v
		}
		if match {
			if m.color == "transparent" {
				return m.text, color.RGBA{}, true
			}
			col, ok := named[m.color]
			if !ok {
				col = named["blue"]
			}
			return m.text, col, true
		}
	}
	return "", named["blue"], false
}

// timeline draws a state timeline: a row per series, each value's span in
// its mapping's colour, with its text where it fits.
func (c *canvas) timeline(p panel, ss []drawnSeries, r image.Rectangle) {
	x0, x1 := r.Min.X+labelWidth, r.Max.X-plotRight
	top := r.Min.Y + titleHeight + eventsHeight
	bottom := top + max(len(ss), 1)*rowHeight
	for i := range ss {
		y := top + i*rowHeight
		c.fill(image.Rect(x0, y+2, x1, y+rowHeight-2), white)
	}
	c.timeAxis(x0, x1, top, bottom)
	c.events(x0, x1, top, bottom)
	ms := p.mappings()
	for i, s := range ss {
		y := top + i*rowHeight
		c.text(r.Min.X+8, y+(rowHeight-glyph.H)/2, s.legend, 1, ink)
		// Runs of equal values, each to the next sample (a gap of more
		// than two steps ends a run: no sample, nothing drawn).
		for j := 0; j < len(s.Samples); {
			k := j
			for k+1 < len(s.Samples) && s.Samples[k+1].Value == s.Samples[j].Value && s.Samples[k+1].At.Sub(s.Samples[k].At) <= 2*scrapeInterval {
				k++
			}
			until := s.Samples[k].At.Add(scrapeInterval)
			if k+1 < len(s.Samples) && s.Samples[k+1].At.Sub(s.Samples[k].At) <= 2*scrapeInterval {
				until = s.Samples[k+1].At
			}
			v := s.Samples[j].Value
			text, col, mapped := colourOf(ms, v)
			if !mapped {
				text = formatValue(p.FieldConfig.Defaults.Unit, v)
			}
			a, b := c.xOf(s.Samples[j].At, x0, x1), max(c.xOf(until, x0, x1), c.xOf(s.Samples[j].At, x0, x1)+1)
			if col.A != 0 {
				c.fill(image.Rect(a, y+2, b, y+rowHeight-2), col)
				if text != "" && b-a > glyph.Width(text, 1)+6 {
					c.text(a+3, y+(rowHeight-glyph.H)/2, text, 1, ink)
				}
			}
			j = k + 1
		}
	}
}

// graph draws a time series panel: lines, bars (stacked when the panel
// stacks) or points on a y axis from 0, and the legend under it.
func (c *canvas) graph(p panel, ss []drawnSeries, r image.Rectangle) {
	x0, x1 := r.Min.X+labelWidth, r.Max.X-plotRight
	top := r.Min.Y + titleHeight + eventsHeight
	bottom := top + plotHeight
	c.fill(image.Rect(x0, top, x1, bottom), white)
	style := p.FieldConfig.Defaults.Custom.DrawStyle
	stacked := style == "bars" && p.FieldConfig.Defaults.Custom.Stacking.Mode == "normal"
	// The highest value drawn: the highest stack when stacked.
	hi := 0.0
	stack := map[int64]float64{}
	for _, s := range ss {
		for _, v := range s.Samples {
			if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
				continue
			}
			h := v.Value
			if stacked {
				stack[v.At.UnixMilli()] += v.Value
				h = stack[v.At.UnixMilli()]
			}
			hi = max(hi, h)
		}
	}
	hi = niceCeil(hi)
	unit := p.FieldConfig.Defaults.Unit
	for i := 0; i <= 4; i++ {
		v := hi * float64(i) / 4
		y := bottom - int(float64(plotHeight)*float64(i)/4)
		c.fill(image.Rect(x0, y, x1, y+1), grid)
		label := formatValue(unit, v)
		c.text(x0-glyph.Width(label, 1)-4, y-glyph.H/2, label, 1, ink)
	}
	c.timeAxis(x0, x1, top, bottom)
	c.events(x0, x1, top, bottom)
	yOf := func(v float64) int { return bottom - int(float64(plotHeight)*v/hi) }
	barW := max(c.xOf(c.start.Add(scrapeInterval), x0, x1)-x0-1, 2)
	clear(stack)
	for i, s := range ss {
		col := palette[i%len(palette)]
		var px, py int
		joined := false
		for j, v := range s.Samples {
			if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
				joined = false
				continue
			}
			x, y := c.xOf(v.At, x0, x1), yOf(v.Value)
			switch style {
			case "bars":
				base := bottom
				if stacked {
					base = yOf(stack[v.At.UnixMilli()])
					stack[v.At.UnixMilli()] += v.Value
					y = yOf(stack[v.At.UnixMilli()])
				}
				c.fill(image.Rect(x-barW/2, y, x-barW/2+barW, base), col)
			case "points":
				c.fill(image.Rect(x-3, y-3, x+4, y+4), col)
			default:
				if joined && j > 0 && v.At.Sub(s.Samples[j-1].At) <= 2*scrapeInterval {
					c.line(px, py, x, y, col)
				}
			}
			px, py, joined = x, y, true
		}
	}
	ly := bottom + axisHeight
	for i, s := range ss {
		x := r.Min.X + 8 + (i%2)*(panelWidth/2)
		yy := ly + (i/2)*legendLine
		c.fill(image.Rect(x, yy+1, x+10, yy+8), palette[i%len(palette)])
		c.text(x+14, yy+1, s.legend, 1, ink)
	}
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// formatValue prints v in a Grafana unit, about as Grafana does.
func formatValue(unit string, v float64) string {
	num := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	round := func(x float64) float64 { return math.Round(x*100) / 100 }
	switch unit {
	case "s":
		switch {
		case v == 0:
			return "0"
		case v < 0.001:
			return num(round(v*1e6)) + " us"
		case v < 1:
			return num(round(v*1000)) + " ms"
		}
		return num(round(v)) + " s"
	case "bytes":
		return num(round(v/(1<<20))) + " mib"
	case "percentunit":
		return num(round(v*100)) + "%"
	case "pps":
		return num(round(v)) + " p/s"
	}
	return num(round(v))
}

// TestDrawPanels draws a made-up run: a VIP held in its mapping's colour
// while it is held and not after, a graph's series in its colour, and a
// glyph for every character the picture prints.
func TestDrawPanels(t *testing.T) {
	d := readCommitted(t)
	start := time.Unix(1000, 0)
	end := start.Add(30 * time.Second)
	ramp := func(held func(sec int) float64) []sample {
		var out []sample
		for sec := 0; sec <= 30; sec++ {
			out = append(out, sample{start.Add(time.Duration(sec) * time.Second), held(sec)})
		}
		return out
	}
	results := map[string][]result{}
	var texts []string
	for _, p := range d.Panels {
		if !slices.Contains(pictured, p.Title) {
			continue
		}
		texts = append(texts, p.Title)
		for _, tg := range p.Targets {
			labels := map[string]string{}
			for _, m := range legendLabel.FindAllStringSubmatch(tg.Legend, -1) {
				labels[m[1]] = "192.0.2.100"
			}
			s := series{Labels: labels, Samples: ramp(func(sec int) float64 { return float64(sec % 2) })}
			if p.Title == "Holder of each VIP" {
				s.Samples = ramp(func(sec int) float64 { return map[bool]float64{true: 1, false: 0}[sec < 15] })
			}
			results[p.Title] = append(results[p.Title], result{tg, []series{s}})
			texts = append(texts, legendText(tg.Legend, labels))
		}
	}
	steps := []step{{start.Add(20 * time.Second), "SIGTERM to ipfailover on node2"}}
	texts = append(texts, steps[0].What)
	img, err := drawPanels(d, results, steps, start, end)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range texts {
		for _, r := range s {
			if !glyph.Has(r) {
				t.Errorf("%q: no glyph for %q", s, r)
			}
		}
	}
	// The first panel, "Holder of each VIP", its first row.
	c := &canvas{start: start, end: end}
	x0, x1 := picMargin+labelWidth, picMargin+panelWidth-plotRight
	row := picMargin + 36 + keyLine + 10 + titleHeight + eventsHeight + rowHeight/2
	if pictured[0] != "Holder of each VIP" {
		t.Fatalf("the first pictured panel is %q", pictured[0])
	}
	for _, tc := range []struct {
		sec  int
		want color.RGBA
	}{{12, named["green"]}, {23, white}} {
		x := c.xOf(start.Add(time.Duration(tc.sec)*time.Second), x0, x1)
		if got := img.At(x, row); got != tc.want {
			t.Errorf("the held VIP's row at %ds (pixel %d, %d) is %v, want %v", tc.sec, x, row, got, tc.want)
		}
	}
}
