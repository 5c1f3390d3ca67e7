package chaos

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"time"

	"github.com/ipfailover/ipfailover/test/glyph"
)

// Colours of the timelines.
var (
	white     = color.RGBA{255, 255, 255, 255}
	ink       = color.RGBA{30, 30, 30, 255}
	faint     = color.RGBA{225, 225, 225, 255}
	grid      = color.RGBA{200, 200, 200, 255}
	answered  = color.RGBA{120, 200, 120, 255}
	outageRed = color.RGBA{220, 30, 30, 255}
	twice     = color.RGBA{255, 140, 0, 255}
	// nodeColours hold a VIP, one per node in turn.
	nodeColours = []color.RGBA{{66, 110, 200, 255}, {40, 160, 150, 255}, {150, 90, 190, 255}, {190, 150, 40, 255}, {110, 110, 110, 255}}
	// kindColours mark the faults, one per kind in the order of LabKinds
	// and then KubeKinds.
	kindColours = []color.RGBA{
		{230, 120, 120, 255}, {200, 60, 60, 255}, {120, 170, 230, 255}, {90, 90, 90, 255}, {150, 150, 230, 255},
		{160, 110, 60, 255}, {240, 180, 60, 255}, {250, 215, 120, 255}, {130, 200, 200, 255}, {120, 200, 120, 255},
		{200, 120, 200, 255}, {100, 150, 100, 255}, {180, 180, 80, 255}, {80, 130, 180, 255}, {60, 60, 140, 255}, {170, 80, 120, 255},
	}
)

// Layout of a timeline, in pixels at scale 1 (text is drawn at scale 2).
const (
	picWidth   = 1800
	picLeft    = 170
	picRight   = 30
	rowHeight  = 26
	rowGap     = 6
	laneHeight = 20
	textScale  = 2
)

// kindColour is the colour of a fault kind.
func kindColour(k Kind) color.RGBA {
	for i, w := range allKinds() {
		if w == k {
			return kindColours[i%len(kindColours)]
		}
	}
	return ink
}

// DrawTimeline draws VIP vi's run: who held it (a row per node), when it
// sat on two nodes (orange), which node the client's neighbour entry sent
// it to (the node's colour; none blank), what the client saw (answered in
// green, outages in red, at least 2 pixels wide so none is lost; the
// client's own stalls a dark band along the row's foot), and the
// faults (a lane
// each while they overlap, from injection to recovery, with the kind and
// number), over a time axis in seconds.
func DrawTimeline(w io.Writer, d *Data, a *Analysis, vi int) error {
	res := a.VIPs[vi]
	lanes := faultLanes(d.Records)
	nLanes := 0
	for _, l := range lanes {
		nLanes = max(nLanes, l+1)
	}
	legendRows := (len(allKinds())+4)/5 + 1
	height := 60 + (len(d.Nodes)+3)*(rowHeight+rowGap) + 20 + nLanes*(laneHeight+2) + 50 + legendRows*24
	img := image.NewRGBA(image.Rect(0, 0, picWidth, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)

	span := d.End.Sub(d.Start)
	plot := picWidth - picLeft - picRight
	xOf := func(t time.Time) int {
		return picLeft + int(float64(plot)*float64(t.Sub(d.Start))/float64(span))
	}
	bar := func(y, h int, iv Interval, c color.Color, minW int) {
		x0, x1 := xOf(iv.Start), xOf(iv.End)
		if x1-x0 < minW {
			x1 = x0 + minW
		}
		x0, x1 = max(x0, picLeft), min(x1, picWidth-picRight)
		draw.Draw(img, image.Rect(x0, y, x1, y+h), &image.Uniform{c}, image.Point{}, draw.Src)
	}
	whole := Interval{d.Start, d.End}

	title := fmt.Sprintf("%s: available %.3f%%, down %s in %d outages, on two nodes %s, no holder %s",
		res.VIP, res.Availability*100, fmtDur(res.Down), len(res.Outages), fmtDur(res.Twice), fmtDur(res.NoHolder))
	glyph.Draw(img, 10, 12, title, textScale, ink)

	y := 50
	row := func(label string) {
		glyph.Draw(img, 10, y+(rowHeight-glyph.H*textScale)/2, label, textScale, ink)
		bar(y, rowHeight, whole, faint, 0)
	}
	for ni, n := range d.Nodes {
		row(n)
		for _, iv := range HeldBy(d.Holdings[res.VIP], d.End, n) {
			if iv, ok := iv.clip(d.Start, d.End); ok {
				bar(y, rowHeight, iv, nodeColours[ni%len(nodeColours)], 1)
			}
		}
		y += rowHeight + rowGap
	}
	row("two nodes")
	for _, iv := range res.Doubles {
		bar(y, rowHeight, iv, twice, 2)
	}
	y += rowHeight + rowGap
	row("client's arp")
	nodeColour := func(name string) color.RGBA {
		for i, n := range d.Nodes {
			if n == name {
				return nodeColours[i%len(nodeColours)]
			}
		}
		return ink
	}
	es := d.Entries[res.VIP]
	for i, e := range es {
		if e.Node == "" {
			continue
		}
		to := d.End
		if i+1 < len(es) {
			to = es[i+1].At
		}
		if iv, ok := (Interval{e.At, to}).clip(d.Start, d.End); ok {
			bar(y, rowHeight, iv, nodeColour(e.Node), 1)
		}
	}
	y += rowHeight + rowGap
	row("client")
	if ps := d.Probes[vi]; len(ps) > 0 {
		bar(y, rowHeight, Interval{ps[0].Sent, ps[len(ps)-1].Done}, answered, 0)
	}
	for _, o := range res.Outages {
		bar(y, rowHeight, o.Interval, outageRed, 2)
	}
	// The client's own stalls: a dark band along the row's foot.
	for _, st := range d.Stalls {
		bar(y+rowHeight-6, 6, st, ink, 2)
	}
	y += rowHeight + rowGap + 10

	glyph.Draw(img, 10, y+2, "faults", textScale, ink)
	for i, r := range d.Records {
		ly := y + lanes[i]*(laneHeight+2)
		iv := Interval{r.Began, r.Recovered}
		bar(ly, laneHeight, iv, kindColour(r.Kind), 3)
		label := fmt.Sprintf("%d %s", r.Index, shortKind(r.Kind))
		if xOf(r.Recovered)-xOf(r.Began) > glyph.Width(label, 1)+4 {
			glyph.Draw(img, xOf(r.Began)+2, ly+(laneHeight-glyph.H)/2, label, 1, ink)
		}
	}
	y += nLanes*(laneHeight+2) + 10

	// The time axis: a tick and a label every step seconds.
	step := axisStep(span)
	for t := time.Duration(0); t <= span; t += step {
		x := xOf(d.Start.Add(t))
		draw.Draw(img, image.Rect(x, 50, x+1, y), &image.Uniform{grid}, image.Point{}, draw.Over)
		label := fmt.Sprintf("%ds", int(t.Seconds()))
		glyph.Draw(img, x-glyph.Width(label, textScale)/2, y+4, label, textScale, ink)
	}
	y += 40

	// Legend: the fault kinds that ran.
	x := 10
	for _, k := range allKinds() {
		ran := false
		for _, r := range d.Records {
			ran = ran || r.Kind == k
		}
		if !ran {
			continue
		}
		label := string(k)
		wdt := 22 + glyph.Width(label, textScale) + 20
		if x+wdt > picWidth {
			x, y = 10, y+24
		}
		draw.Draw(img, image.Rect(x, y, x+16, y+16), &image.Uniform{kindColour(k)}, image.Point{}, draw.Src)
		glyph.Draw(img, x+22, y+1, label, textScale, ink)
		x += wdt
	}
	return png.Encode(w, img)
}

// faultLanes gives each record the lowest lane free at its start, so
// overlapping faults stack.
func faultLanes(rs []Record) []int {
	lanes := make([]int, len(rs))
	var freeAt []time.Time
	for i, r := range rs {
		lane := -1
		for l, t := range freeAt {
			if !r.Began.Before(t) {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(freeAt)
			freeAt = append(freeAt, time.Time{})
		}
		// A little room after each, so labels do not touch.
		end := r.Recovered
		if least := r.Began.Add(time.Second); end.Before(least) {
			end = least
		}
		freeAt[lane] = end
		lanes[i] = lane
	}
	return lanes
}

// axisStep picks a tick every 5, 10, 30 or 60 s or more: about 15 ticks.
func axisStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute} {
		if span/s <= 20 {
			return s
		}
	}
	return 10 * time.Minute
}

// shortKind is the label of a kind inside a fault's bar.
func shortKind(k Kind) string {
	switch k {
	case ServiceStop:
		return "svc"
	case KeepalivedKill:
		return "ka-kill"
	case EntrypointTerm:
		return "term"
	case NodeDeath:
		return "death"
	case NodeFreeze:
		return "freeze"
	case LinkCut:
		return "cut"
	case Partition:
		return "part"
	case PartitionOneWay:
		return "part1"
	case Segment:
		return "seg"
	case Rollout:
		return "roll"
	case PodDelete:
		return "del"
	case ConfigRollout:
		return "config"
	case Drain:
		return "drain"
	case APIServerStop:
		return "api"
	}
	return string(k)
}
