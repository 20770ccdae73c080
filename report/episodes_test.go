package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// ep is an episode with reward r and, when q ≥ 0, mean summary quality q.
func ep(id string, r, q float64, status episode.Status, override string) episode.Episode {
	e := episode.Episode{ID: id, Reward: r, Status: status, Metrics: map[string]float64{"compactions": 2}, Meta: map[string]string{}}
	if q >= 0 {
		e.Metrics["summary_quality"] = q
	}
	if override != "" {
		e.Meta[episode.MetaSummaryOverride] = override
		e.Metrics["summary_overrides"] = 2
	}
	return e
}

func TestSummarizeEpisodesAndBins(t *testing.T) {
	ok := episode.StatusOK
	eps := []episode.Episode{
		ep("a", 1, 1, ok, ""), ep("b", 0, 1, ok, ""), ep("c", 1, 0.75, ok, ""), ep("d", 0, 0.5, ok, ""),
		ep("e", 0, 0, ok, ""), ep("f", 0, 0.2, episode.StatusOverlong, ""), ep("g", 1, -1, ok, ""),
		ep("h", 1, 1, episode.StatusInfraError, ""), // masked: counted in Episodes only
	}
	s := SummarizeEpisodes(eps)
	if s.Episodes != 8 || s.Scored != 7 || s.Passed != 3 || s.WithSummary != 6 || s.Override != "" {
		t.Fatalf("stats %+v", s)
	}
	if want := (1 + 1 + 0.75 + 0.5 + 0 + 0.2) / 6; math.Abs(s.Quality-want) > 1e-12 || s.Compactions != 2 {
		t.Fatalf("quality %v (want %v), compactions %v", s.Quality, want, s.Compactions)
	}
	if !(s.PassLo < 3.0/7 && 3.0/7 < s.PassHi) {
		t.Fatalf("Wilson [%v, %v] misses 3/7", s.PassLo, s.PassHi)
	}
	bins, none, err := BinByQuality(eps, DefaultQualityBins())
	if err != nil {
		t.Fatal(err)
	}
	// [0,.25): e, f · [.25,.5): – · [.5,.75): d · [.75,1): c · 1: a, b · none: g
	want := [][2]int{{2, 0}, {0, 0}, {1, 0}, {1, 1}, {2, 1}}
	for i, b := range bins {
		if b.N != want[i][0] || b.Passed != want[i][1] {
			t.Fatalf("bin %s: %d/%d, want %d/%d", b.Label(), b.Passed, b.N, want[i][1], want[i][0])
		}
	}
	if none.N != 1 || none.Passed != 1 {
		t.Fatalf("no-summary bin %+v", none)
	}
	if _, _, err := BinByQuality([]episode.Episode{ep("x", 0, 1.5, ok, "")}, DefaultQualityBins()); err == nil {
		t.Fatal("quality 1.5 binned")
	}
	// The last summary's drop: nothing, re-shown, hidden; an earlier
	// summary's drop does not count.
	drop := func(id string, r float64, c int, dropped, visible string) episode.Episode {
		e := ep(id, r, 0.5, ok, "drop-one")
		e.Metrics["compactions"] = float64(c)
		e.Meta[fmt.Sprintf("summary_%d_dropped", c)] = dropped
		if visible != "" {
			e.Meta[fmt.Sprintf("summary_%d_dropped_visible", c)] = visible
		}
		return e
	}
	earlier := drop("x", 1, 2, "amber 10", "false")
	delete(earlier.Meta, "summary_2_dropped")
	d := SummarizeEpisodes([]episode.Episode{drop("a", 1, 1, "", ""), drop("b", 1, 2, "amber 10", "true"), drop("c", 0, 2, "amber 10", "false"),
		drop("d", 1, 3, "cedar 11", "false"), earlier})
	if d.LastDrop != [3]PassCount{{1, 1}, {1, 1}, {2, 1}} {
		t.Fatalf("last drops %v", d.LastDrop)
	}
	mixed := SummarizeEpisodes([]episode.Episode{ep("a", 1, 1, ok, "expert"), ep("b", 1, 1, ok, "expert")})
	if mixed.Override != "expert" || mixed.Overrides != 4 {
		t.Fatalf("override stats %+v", mixed)
	}
	if SummarizeEpisodes([]episode.Episode{ep("a", 1, 1, ok, "expert"), ep("b", 1, 1, ok, "")}).Override != "mixed" {
		t.Fatal("mixed overrides not reported")
	}
}

func TestEpisodeTablesAndSVG(t *testing.T) {
	ok := episode.StatusOK
	base := []episode.Episode{ep("a", 1, 1, ok, ""), ep("b", 0, 0, ok, ""), ep("c", 0, 0.5, ok, "")}
	rl := []episode.Episode{ep("a", 1, 1, ok, ""), ep("b", 1, 1, ok, ""), ep("c", 0, -1, ok, "")}
	var out bytes.Buffer
	series, err := WriteEpisodeTables(&out, []string{"base", "rl"}, [][]episode.Episode{base, rl}, DefaultQualityBins())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| base | own | 3 | 0.333 [", "(1/3) | 0.500 | 2.00 | 0 | 0 |",
		"| rl | own | 3 | 0.667 [", "| base | 0.000 [0.000, 0.793] (1) | – (0) | 0.000 [0.000, 0.793] (1) | – (0) | 1.000 [0.207, 1.000] (1) | – (0) |",
		"| rl | – (0) | – (0) | – (0) | – (0) | 1.000 [0.342, 1.000] (2) | 0.000 [0.000, 0.793] (1) |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("tables lack %q:\n%s", want, out.String())
		}
	}
	var drops bytes.Buffer
	de := ep("d", 1, 0.5, ok, "drop-one")
	de.Metrics["compactions"] = 1
	de.Meta["summary_1_dropped"], de.Meta["summary_1_dropped_visible"] = "amber 10", "false"
	if _, err := WriteEpisodeTables(&drops, []string{"drop"}, [][]episode.Episode{{de}}, DefaultQualityBins()); err != nil {
		t.Fatal(err)
	}
	if want := "| drop | – (0) | – (0) | 1.000 [0.207, 1.000] (1) |"; !strings.Contains(drops.String(), want) || strings.Contains(out.String(), "drop-one episodes") {
		t.Fatalf("drop table lacks %q (or shows without drop-one episodes):\n%s", want, drops.String())
	}
	svg := QualitySVG("pass@1 <by> quality", series)
	// Well-formed XML, one point per non-empty bin (3 + 1), each with its
	// interval bar and its count.
	d := xml.NewDecoder(strings.NewReader(svg))
	circles, counts := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	counts = strings.Count(svg, "font-size=\"9\"")
	if circles != 4 || counts != 4 || !strings.Contains(svg, "pass@1 &lt;by&gt; quality") || !strings.Contains(svg, "rl, quality 1: 2/2 = 1.000") {
		t.Fatalf("%d points, %d counts:\n%s", circles, counts, svg)
	}
	if _, err := WriteEpisodeTables(io.Discard, []string{"one"}, nil, DefaultQualityBins()); err == nil {
		t.Fatal("names and sets of different lengths accepted")
	}
}
