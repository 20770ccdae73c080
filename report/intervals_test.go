package report

import (
	"math"
	"strings"
	"testing"
)

// Each row's mean, interval ends and pooled values land at x = 300 + v·448
// (the label column, then the 0–1 axis); a row without an interval has no
// bar; labels are escaped.
func TestIntervalsSVG(t *testing.T) {
	svg := IntervalsSVG("arms", "pass@1", []Interval{
		{Label: "a<b", Mean: 0.5, Lo: 0.25, Hi: 0.75, Values: []float64{0.4, 0.6}},
		{Label: "base", Mean: 0.125, Lo: math.NaN(), Hi: math.NaN(), Values: []float64{0.125}},
	})
	for _, want := range []string{
		`cx="524.0" cy="45.0" r="4"`, // 300 + 0.5·448, row 0 at 34 + 11
		`x1="412.0" x2="636.0" y1="45.0"`,
		`cx="479.2" cy="39.0" r="2.5"`, // 0.4
		`cx="356.0" cy="67.0" r="4"`,   // 0.125, row 1 at 34 + 22 + 11
		"a&lt;b",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, `stroke-width="3"`); n != 1 {
		t.Errorf("%d interval bars, want 1 (the second row has none)", n)
	}
	if !strings.HasPrefix(svg, "<svg") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Error("not one svg element")
	}
}
