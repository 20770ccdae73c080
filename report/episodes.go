package report

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/stats"
)

// Episode-level reports: held-out episode JSONL (compactrl rollout) as
// pass@1 with its Wilson interval, summary quality and compactions
// (EpisodeStats), and pass@1 by the episodes' mean summary quality
// (QualityBins, QualitySVG). The keys are the agent loop's: metrics
// "summary_quality" (the mean of an episode's summaries' qualities, absent
// without a summary), "compactions", "summary_overrides",
// "summary_drop_none", "summary_override_truncated"; meta
// episode.MetaSummaryOverride.

// EpisodeStats is one set of episodes' outcome. Masked episodes
// (infra_error, verifier_error) are counted in Episodes only.
type EpisodeStats struct {
	Episodes, Scored, Passed int
	PassLo, PassHi           float64 // 95% Wilson interval of Passed/Scored
	WithSummary              int     // scored episodes with at least one summary
	Quality                  float64 // mean over them of the episode's mean summary quality (NaN without any)
	Compactions              float64 // mean per scored episode
	Override                 string  // the episodes' summary override ("" for the policy's own; "mixed" when they differ)
	Overrides                int     // summaries replaced
	DropNone                 int     // drop-one summaries written before any needed fact was seen
	Truncated                int     // replacements cut to the summary budget
	// LastDrop splits the scored episodes whose last summary was a
	// drop-one override: [0] nothing dropped (no needed fact seen yet),
	// [1] the dropped fact still shown in the re-included steps, [2] the
	// dropped fact shown nowhere in the resumed context.
	LastDrop [3]PassCount
}

// PassCount is a number of episodes and how many of them passed.
type PassCount struct{ N, Passed int }

// Rate is Passed/N with its 95% Wilson interval (NaN when N is 0).
func (c PassCount) Rate() (p, lo, hi float64) {
	lo, hi = stats.Wilson(c.Passed, c.N)
	if c.N == 0 {
		return math.NaN(), lo, hi
	}
	return float64(c.Passed) / float64(c.N), lo, hi
}

// lastDrop classifies an episode by its last summary's drop-one override:
// 0 nothing dropped, 1 dropped but re-shown, 2 dropped and hidden; -1 when
// the last summary was no drop-one.
func lastDrop(e *episode.Episode) int {
	c := int(e.Metrics["compactions"])
	dropped, ok := e.Meta[fmt.Sprintf("summary_%d_dropped", c)]
	switch {
	case c == 0 || !ok:
		return -1
	case dropped == "":
		return 0
	case e.Meta[fmt.Sprintf("summary_%d_dropped_visible", c)] == "true":
		return 1
	}
	return 2
}

// PassRate is Passed/Scored (NaN when nothing was scored).
func (s EpisodeStats) PassRate() float64 {
	if s.Scored == 0 {
		return math.NaN()
	}
	return float64(s.Passed) / float64(s.Scored)
}

// passed reports an all-or-nothing success; partial credit counts only
// when whole.
func passed(e *episode.Episode) bool { return e.Reward >= 1 }

// SummarizeEpisodes computes EpisodeStats.
func SummarizeEpisodes(eps []episode.Episode) EpisodeStats {
	var s EpisodeStats
	q, comp := 0.0, 0.0
	for i := range eps {
		e := &eps[i]
		s.Episodes++
		o := e.Meta[episode.MetaSummaryOverride]
		switch {
		case i == 0:
			s.Override = o
		case o != s.Override:
			s.Override = "mixed"
		}
		if !e.Status.Scored() {
			continue
		}
		s.Scored++
		if passed(e) {
			s.Passed++
		}
		comp += e.Metrics["compactions"]
		if v, ok := e.Metrics["summary_quality"]; ok {
			s.WithSummary++
			q += v
		}
		s.Overrides += int(e.Metrics["summary_overrides"])
		s.DropNone += int(e.Metrics["summary_drop_none"])
		s.Truncated += int(e.Metrics["summary_override_truncated"])
		if k := lastDrop(e); k >= 0 {
			s.LastDrop[k].N++
			if passed(e) {
				s.LastDrop[k].Passed++
			}
		}
	}
	s.PassLo, s.PassHi = stats.Wilson(s.Passed, s.Scored)
	s.Quality, s.Compactions = math.NaN(), math.NaN()
	if s.WithSummary > 0 {
		s.Quality = q / float64(s.WithSummary)
	}
	if s.Scored > 0 {
		s.Compactions = comp / float64(s.Scored)
	}
	return s
}

// QualityBin is one interval of mean summary quality, [Lo, Hi) or, when
// Closed, [Lo, Hi], with the scored episodes in it and how many passed.
type QualityBin struct {
	Lo, Hi    float64
	Closed    bool
	N, Passed int
}

// Contains reports whether quality q falls in the bin.
func (b QualityBin) Contains(q float64) bool {
	return q >= b.Lo && (q < b.Hi || (b.Closed && q <= b.Hi))
}

// Label is the bin's interval as text, "[0.25, 0.5)" or "1".
func (b QualityBin) Label() string {
	switch {
	case b.Closed && b.Lo == b.Hi:
		return num(b.Lo)
	case b.Closed:
		return fmt.Sprintf("[%s, %s]", num(b.Lo), num(b.Hi))
	}
	return fmt.Sprintf("[%s, %s)", num(b.Lo), num(b.Hi))
}

// Rate is the bin's pass rate with its 95% Wilson interval (NaN when
// empty).
func (b QualityBin) Rate() (p, lo, hi float64) { return PassCount{b.N, b.Passed}.Rate() }

// DefaultQualityBins are quarters of [0, 1) and quality exactly 1 apart:
// every fact seen kept by every summary (or none seen when it wrote them).
func DefaultQualityBins() []QualityBin {
	return []QualityBin{{Lo: 0, Hi: 0.25}, {Lo: 0.25, Hi: 0.5}, {Lo: 0.5, Hi: 0.75}, {Lo: 0.75, Hi: 1}, {Lo: 1, Hi: 1, Closed: true}}
}

// BinByQuality counts the scored episodes of eps in bins (copied, counts
// reset) by their mean summary quality; episodes without a summary go to
// none. A quality outside every bin is an error.
func BinByQuality(eps []episode.Episode, bins []QualityBin) (out []QualityBin, none QualityBin, err error) {
	out = make([]QualityBin, len(bins))
	for i, b := range bins {
		out[i] = QualityBin{Lo: b.Lo, Hi: b.Hi, Closed: b.Closed}
	}
	for i := range eps {
		e := &eps[i]
		if !e.Status.Scored() {
			continue
		}
		q, ok := e.Metrics["summary_quality"]
		b := &none
		if ok {
			b = nil
			for j := range out {
				if out[j].Contains(q) {
					b = &out[j]
					break
				}
			}
			if b == nil {
				return nil, none, fmt.Errorf("episode %s: summary quality %v in no bin", e.ID, q)
			}
		}
		b.N++
		if passed(e) {
			b.Passed++
		}
	}
	return out, none, nil
}

// ReadEpisodes reads episode JSONL.
func ReadEpisodes(r io.Reader) ([]episode.Episode, error) {
	var eps []episode.Episode
	rd := episode.NewReader(r)
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return eps, nil
		}
		if err != nil {
			return nil, fmt.Errorf("episodes: %w", err)
		}
		eps = append(eps, e)
	}
}

// QualitySeries is one policy's episodes binned by summary quality.
type QualitySeries struct {
	Label string
	Bins  []QualityBin
}

// QualitySVG plots each series' pass@1 (with its 95% Wilson interval as a
// bar) against the bins' mid-points of mean summary quality, each point
// labelled with its count; empty bins are left out.
func QualitySVG(title string, series []QualitySeries) string {
	var b strings.Builder
	legendRows := (len(series) + 1) / 2
	h := plotH + legendRowH*max(0, legendRows-2)
	sx := func(x float64) float64 { return padL + x*innerW }
	sy := func(y float64) float64 { return padT + (1-y)*innerH }
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-size=\"11\" font-family=\"sans-serif\">\n", plotW, h, plotW, h)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"16\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", padL, esc(title))
	fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", padL, padT, innerW, innerH)
	for _, t := range []float64{0, 0.2, 0.4, 0.6, 0.8, 1} {
		fmt.Fprintf(&b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>", padL, padL+innerW, sy(t), sy(t))
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", padL-4, sy(t)+4, num(t))
		fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#999\"/>", sx(t), sx(t), padT+innerH, padT+innerH+4)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", sx(t), padT+innerH+16, num(t))
	}
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">mean summary quality of the episode</text>\n", padL+innerW/2, padT+innerH+30)
	fmt.Fprintf(&b, "<text transform=\"translate(12 %d) rotate(-90)\" text-anchor=\"middle\">pass@1</text>\n", padT+innerH/2)
	for i, s := range series {
		c := palette[i%len(palette)]
		dx := (float64(i) - float64(len(series)-1)/2) * 6 // side by side
		var path []string
		for _, bin := range s.Bins {
			p, lo, hi := bin.Rate()
			if bin.N == 0 {
				continue
			}
			x := sx((bin.Lo+bin.Hi)/2) + dx
			path = append(path, fmt.Sprintf("%.1f,%.1f", x, sy(p)))
			fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>", x, x, sy(lo), sy(hi), c)
			fmt.Fprintf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s</title></circle>", x, sy(p), c,
				esc(fmt.Sprintf("%s, quality %s: %d/%d = %.3f [%.3f, %.3f]", s.Label, bin.Label(), bin.Passed, bin.N, p, lo, hi)))
			fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"%s\">%d</text>\n", x+4, sy(p)-4, c, bin.N)
		}
		if len(path) > 1 {
			fmt.Fprintf(&b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" stroke-dasharray=\"4 3\" points=\"%s\"/>\n", c, strings.Join(path, " "))
		}
		lx := legendX0 + legendColW*(i%2)
		ly := padT + innerH + 46 + legendRowH*(i/2)
		fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", lx, ly-4, c, lx+16, ly, esc(s.Label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// WriteEpisodeTables writes Markdown tables: one row per named set of
// episodes (pass@1 with its Wilson interval, summary quality,
// compactions, override counts), then pass@1 by mean summary quality
// per set.
func WriteEpisodeTables(w io.Writer, names []string, sets [][]episode.Episode, bins []QualityBin) ([]QualitySeries, error) {
	if len(names) != len(sets) {
		return nil, fmt.Errorf("%d names for %d episode sets", len(names), len(sets))
	}
	var b strings.Builder
	b.WriteString("| episodes | override | scored | pass@1 [95% Wilson] | summary quality | compactions / ep. | summaries replaced | drop-one with nothing to drop |\n|---|---|---|---|---|---|---|---|\n")
	for i, eps := range sets {
		s := SummarizeEpisodes(eps)
		o := s.Override
		if o == "" {
			o = "own"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.3f [%.3f, %.3f] (%d/%d) | %.3f | %.2f | %d | %d |\n",
			names[i], o, s.Scored, s.PassRate(), s.PassLo, s.PassHi, s.Passed, s.Scored, s.Quality, s.Compactions, s.Overrides, s.DropNone)
	}
	drops := false
	for i, eps := range sets {
		s := SummarizeEpisodes(eps)
		if s.LastDrop[0].N+s.LastDrop[1].N+s.LastDrop[2].N == 0 {
			continue
		}
		if !drops {
			b.WriteString("\ndrop-one episodes by what their last summary dropped:\n\n| episodes | nothing (no needed fact seen yet) | a fact the re-included steps still show | a fact shown nowhere after the compaction |\n|---|---|---|---|\n")
			drops = true
		}
		fmt.Fprintf(&b, "| %s |", names[i])
		for _, c := range s.LastDrop {
			p, lo, hi := c.Rate()
			if c.N == 0 {
				b.WriteString(" – (0) |")
				continue
			}
			fmt.Fprintf(&b, " %.3f [%.3f, %.3f] (%d) |", p, lo, hi, c.N)
		}
		b.WriteString("\n")
	}
	b.WriteString("\npass@1 by the episode's mean summary quality (episodes without a summary apart):\n\n| episodes |")
	for _, bin := range bins {
		fmt.Fprintf(&b, " %s |", bin.Label())
	}
	b.WriteString(" no summary |\n|---|" + strings.Repeat("---|", len(bins)+1) + "\n")
	var series []QualitySeries
	for i, eps := range sets {
		got, none, err := BinByQuality(eps, bins)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[i], err)
		}
		series = append(series, QualitySeries{Label: names[i], Bins: got})
		fmt.Fprintf(&b, "| %s |", names[i])
		for _, bin := range append(got, none) {
			if bin.N == 0 {
				b.WriteString(" – (0) |")
				continue
			}
			p, lo, hi := bin.Rate()
			fmt.Fprintf(&b, " %.3f [%.3f, %.3f] (%d) |", p, lo, hi, bin.N)
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return nil, fmt.Errorf("episode tables: %w", err)
	}
	return series, nil
}
