package report

import (
	"fmt"
	"math"
	"strings"
)

// Interval is one labelled estimate: its mean, its interval [Lo, Hi] and
// the values it pools (an experiment arm: pass@1 per seed).
type Interval struct {
	Label    string
	Mean     float64
	Lo, Hi   float64 // NaN when there is no interval (one value)
	Values   []float64
	Subtitle string // shown after the label, e.g. the interval in numbers
}

// IntervalsSVG draws one row per estimate against a shared x axis from 0
// to 1: the mean as a dot, the interval as a bar, each pooled value as a
// small open circle, so overlap between rows can be read directly.
func IntervalsSVG(title, xLabel string, rows []Interval) string {
	const labelW, rowH, top, bottom, right = 300, 22, 34, 44, 16
	w := labelW + innerW + right
	h := top + rowH*len(rows) + bottom
	sx := func(x float64) float64 { return labelW + math.Max(0, math.Min(1, x))*innerW }
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-size=\"11\" font-family=\"sans-serif\">\n", w, h, w, h)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	fmt.Fprintf(&b, "<text x=\"8\" y=\"16\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", esc(title))
	y0, y1 := top-6, top+rowH*len(rows)
	for _, t := range []float64{0, 0.2, 0.4, 0.6, 0.8, 1} {
		fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/>", sx(t), sx(t), y0, y1)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", sx(t), y1+14, num(t))
	}
	fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", sx(0.5), y1+30, esc(xLabel))
	for i, r := range rows {
		c := palette[i%len(palette)]
		y := float64(top + rowH*i + rowH/2)
		label := r.Label
		if r.Subtitle != "" {
			label += " " + r.Subtitle
		}
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>", labelW-8, y+4, esc(label))
		if !math.IsNaN(r.Lo) && !math.IsNaN(r.Hi) {
			fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\" opacity=\"0.5\"/>", sx(r.Lo), sx(r.Hi), y, y, c)
		}
		for _, v := range r.Values {
			fmt.Fprintf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"none\" stroke=\"%s\"/>", sx(v), y-6, c)
		}
		if !math.IsNaN(r.Mean) {
			tip := fmt.Sprintf("%s: %.3f", r.Label, r.Mean)
			if !math.IsNaN(r.Lo) && !math.IsNaN(r.Hi) {
				tip += fmt.Sprintf(" [%.3f, %.3f]", r.Lo, r.Hi)
			}
			fmt.Fprintf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%s</title></circle>", sx(r.Mean), y, c, esc(tip))
		}
		b.WriteString("\n")
	}
	b.WriteString("</svg>\n")
	return b.String()
}
