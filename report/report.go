// Package report turns training runs into a self-contained HTML page.
//
// Data flow: a run directory holds metrics.jsonl (one JSON object per
// iteration, written by train) and optionally config.yaml; Load reads them
// into a Run, and WriteHTML renders one or more Runs as a single HTML file
// with inline SVG line plots (no scripts, no external assets), plus any
// tables the caller adds (the experiment command adds its results table).
//
// Only numeric fields are plotted. A field missing from an iteration (the
// held-out evaluation runs every N iterations only) leaves a gap in that
// series, never a zero.
package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compactrl/compactrl/stats"
)

// Record is one iteration's numeric metrics, keyed by field name.
type Record map[string]float64

// Run is one training run: its metrics in iteration order and the config
// text it ran with (shown verbatim, escaped).
type Run struct {
	Name    string
	Records []Record
	Config  string
}

// Table is a captioned table of preformatted cells.
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}

// Page is everything one report shows.
type Page struct {
	Title  string
	Notes  []string // paragraphs of plain text shown under the title
	Tables []Table
	Runs   []Run
	// Curves are plots of their own data (e.g. pretraining losses), drawn
	// after the runs' panels.
	Curves []Curve
	// Texts are preformatted excerpts (e.g. held-out transcripts).
	Texts []Text
	// Figures are SVG images made by this package (IntervalsSVG), shown
	// after the tables.
	Figures []string
}

// Curve is a panel drawn from its own runs.
type Curve struct {
	Panel Panel
	Runs  []Run
}

// Text is a titled preformatted excerpt.
type Text struct {
	Title string
	Body  string
}

// Series names one metric to draw and its legend label.
type Series struct {
	Key   string
	Label string
}

// Panel is one plot: several series sharing an axis.
type Panel struct {
	Title  string
	YLabel string
	Series []Series
}

// DefaultPanels are the plots of a CompactionRL run: learning curves,
// summary quality and length, PPO diagnostics, throughput and time split.
// Field names are those train writes to metrics.jsonl.
func DefaultPanels() []Panel {
	return []Panel{
		{"Reward (training rollouts)", "mean reward", []Series{{"reward", "reward"}}},
		{"Held-out pass@1", "pass@1", []Series{{"eval_pass1_compact", "with compaction"}, {"eval_pass1_single", "single window"}, {"eval_reward", "mean reward (compaction)"}}},
		{"Summary quality", "fraction of facts kept", []Series{{"summary_quality", "training rollouts"}, {"eval_summary_quality", "held-out"}}},
		{"Summary length", "tokens", []Series{{"summary_tokens", "mean summary length"}}},
		{"Compactions and turns", "per episode", []Series{{"compactions", "compactions"}, {"turns", "turns"}}},
		{"PPO clip fraction", "fraction of tokens", []Series{{"clip_frac", "clip fraction"}}},
		{"Approximate KL(π_old‖π)", "nats / token", []Series{{"approx_kl", "approx KL"}}},
		{"Value loss", "loss", []Series{{"value_loss", "value loss"}}},
		{"Entropy", "nats / token", []Series{{"entropy", "entropy"}}},
		{"Throughput", "tokens / s", []Series{{"rollout_tokens_per_s", "rollout"}, {"train_tokens_per_s", "training"}}},
		{"Time split", "seconds / iteration", []Series{{"time_rollout_s", "rollout"}, {"time_train_s", "train"}, {"time_eval_s", "eval"}}},
	}
}

// ReadMetrics parses JSONL: one object per non-blank line. Numeric fields
// (and booleans, as 0/1) are kept; strings, nulls, arrays and objects are
// ignored, as are non-finite numbers. A line that is not a JSON object is
// an error naming its line number.
func ReadMetrics(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	var out []Record
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return out, fmt.Errorf("metrics line %d: %w", line, err)
		}
		rec := Record{}
		for k, v := range raw {
			var x any
			if err := json.Unmarshal(v, &x); err != nil {
				continue
			}
			switch t := x.(type) {
			case float64:
				if !math.IsNaN(t) && !math.IsInf(t, 0) {
					rec[k] = t
				}
			case bool:
				if t {
					rec[k] = 1
				} else {
					rec[k] = 0
				}
			}
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("metrics line %d: %w", line+1, err)
	}
	return out, nil
}

// Load reads dir/metrics.jsonl (required) and dir/config.yaml (optional).
// An empty metrics file is a Run with no records, not an error.
func Load(dir string) (Run, error) {
	run := Run{Name: filepath.Base(filepath.Clean(dir))}
	p := filepath.Join(dir, "metrics.jsonl")
	f, err := os.Open(p)
	if err != nil {
		return run, fmt.Errorf("load run %s: %w", dir, err)
	}
	defer f.Close()
	run.Records, err = ReadMetrics(f)
	if err != nil {
		return run, fmt.Errorf("load %s: %w", p, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "config.yaml")); err == nil {
		run.Config = string(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return run, fmt.Errorf("load run %s: %w", dir, err)
	}
	return run, nil
}

// Generate writes dir/report.html for the run in dir and returns its path:
// held-out pass@1 before and after RL with 95% Wilson intervals, the
// learning curves, the pretraining curves (dir/pretrain.jsonl, else
// dir/sft.jsonl, when present) and the held-out transcripts that train
// kept under dir/transcripts (the first evaluation's and the final one).
func Generate(dir string) (string, error) {
	run, err := Load(dir)
	if err != nil {
		return "", err
	}
	page := Page{Title: "CompactionRL run " + run.Name, Runs: []Run{run}}
	if t, ok := BeforeAfter(run.Records); ok {
		page.Tables = append(page.Tables, t)
	}
	for _, name := range []string{"pretrain.jsonl", "sft.jsonl"} {
		c, ok, err := loadPretrainCurve(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		if ok {
			page.Curves = append(page.Curves, c)
			break
		}
	}
	texts, err := loadTranscripts(filepath.Join(dir, "transcripts"))
	if err != nil {
		return "", err
	}
	page.Texts = texts
	out := filepath.Join(dir, "report.html")
	if err := WriteFile(out, page); err != nil {
		return "", err
	}
	return out, nil
}

// BeforeAfter is the table of held-out pass@1 at the first and the last
// evaluation of a run's records (fields eval_pass1_compact,
// eval_pass1_single, eval_episodes), with 95% Wilson intervals; ok is false
// with fewer than two evaluations.
func BeforeAfter(recs []Record) (Table, bool) {
	var evals []Record
	for _, r := range recs {
		if _, ok := r["eval_pass1_compact"]; ok {
			evals = append(evals, r)
		}
	}
	if len(evals) < 2 {
		return Table{}, false
	}
	t := Table{Caption: "Held-out pass@1 before and after RL (95% Wilson intervals)",
		Header: []string{"", "iteration", "episodes", "pass@1 with compaction", "pass@1 single window", "summary quality", "compactions / episode"}}
	for i, r := range []Record{evals[0], evals[len(evals)-1]} {
		n := int(r["eval_episodes"])
		ci := func(key string) string {
			p, ok := r[key]
			if !ok {
				return "–"
			}
			if n == 0 {
				return num(p)
			}
			return stats.RateCI(p, n)
		}
		opt := func(key string) string {
			if v, ok := r[key]; ok {
				return fmt.Sprintf("%.3f", v)
			}
			return "–"
		}
		t.Rows = append(t.Rows, []string{[]string{"before RL", "after RL"}[i], fmt.Sprint(int(r["iteration"])), fmt.Sprint(n),
			ci("eval_pass1_compact"), ci("eval_pass1_single"), opt("eval_summary_quality"), opt("eval_compactions")})
	}
	return t, true
}

// loadPretrainCurve reads a warm start's per-step records (train's
// SFTRecord: phase, step, loss, recall_loss) into a loss panel: one series
// per phase against the global step, each point the mean of 25 steps.
func loadPretrainCurve(path string) (Curve, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Curve{}, false, nil
	} else if err != nil {
		return Curve{}, false, fmt.Errorf("pretraining curve %s: %w", path, err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	type acc struct {
		sum    float64
		n      int
		firstX int
	}
	const window = 25
	var recs []Record
	open := map[string]*acc{}
	flush := func(key string, a *acc) {
		if a.n > 0 {
			recs = append(recs, Record{"iteration": float64(a.firstX), key: a.sum / float64(a.n)})
		}
		*a = acc{}
	}
	add := func(key string, x int, v float64) {
		a := open[key]
		if a == nil {
			a = &acc{}
			open[key] = a
		}
		if a.n == 0 {
			a.firstX = x
		}
		a.sum += v
		a.n++
		if a.n == window {
			flush(key, a)
		}
	}
	var series []Series
	seen := map[string]bool{}
	for x := 0; ; x++ {
		var r struct {
			Phase      string   `json:"phase"`
			Loss       float64  `json:"loss"`
			RecallLoss *float64 `json:"recall_loss"`
		}
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Curve{}, false, fmt.Errorf("pretraining curve %s record %d: %w", path, x+1, err)
		}
		keys := []string{r.Phase}
		vals := []float64{r.Loss}
		if r.RecallLoss != nil {
			keys, vals = append(keys, r.Phase+" (recall sequences)"), append(vals, *r.RecallLoss)
		}
		for i, k := range keys {
			if !seen[k] {
				seen[k] = true
				series = append(series, Series{Key: k, Label: k})
			}
			add(k, x, vals[i])
		}
	}
	for k, a := range open {
		flush(k, a)
	}
	if len(recs) == 0 {
		return Curve{}, false, nil
	}
	return Curve{Panel: Panel{Title: "Pretraining loss (" + filepath.Base(path) + ")", YLabel: "−log π per token", Series: series},
		Runs: []Run{{Name: "pretraining", Records: recs}}}, true, nil
}

// loadTranscripts returns the first evaluation's and the final held-out
// transcript of dir (train's eval-NNNNNN.txt and final.txt), and the
// before/after pair on one task (pair-before.txt, pair-after.txt), if
// present.
func loadTranscripts(dir string) ([]Text, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("transcripts %s: %w", dir, err)
	}
	var first, final string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, "eval-") && strings.HasSuffix(n, ".txt") && (first == "" || n < first) {
			first = n
		}
		if n == "final.txt" {
			final = n
		}
	}
	var out []Text
	for _, x := range []struct{ title, name string }{
		{"Held-out transcript before RL (the first evaluation's first episode that compacted)", first},
		{"Held-out transcript after RL (the final evaluation's first episode that compacted)", final},
	} {
		if x.name == "" || (x.name == first && first == final) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, x.name))
		if err != nil {
			return nil, fmt.Errorf("transcripts %s: %w", dir, err)
		}
		out = append(out, Text{Title: x.title + ": " + x.name, Body: string(b)})
	}
	// The before/after pair on one task (train.PairBefore, train.PairAfter),
	// when the run kept one.
	for _, x := range []struct{ title, name string }{
		{"The same task before RL (the base fails)", "pair-before.txt"},
		{"The same task after RL (the trained policy succeeds)", "pair-after.txt"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, x.name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("transcripts %s: %w", dir, err)
		}
		out = append(out, Text{Title: x.title + ": " + x.name, Body: string(b)})
	}
	return out, nil
}

// WriteFile renders p to path (written whole, then renamed into place).
func WriteFile(path string, p Page) error {
	var buf bytes.Buffer
	if err := WriteHTML(&buf, p); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}

// WriteHTML renders the page with DefaultPanels.
func WriteHTML(w io.Writer, p Page) error {
	return WriteHTMLPanels(w, p, DefaultPanels())
}

// WriteHTMLPanels renders the page: title, notes, tables, a summary table per
// run (first and last value of every plotted field), then one SVG per panel
// that has data in at least one run. Panels without data are listed as such.
func WriteHTMLPanels(w io.Writer, p Page, panels []Panel) error {
	var b strings.Builder
	title := p.Title
	if title == "" {
		title = "CompactionRL report"
	}
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>%s</title>\n", esc(title))
	b.WriteString("<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}" +
		"table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}" +
		"th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}" +
		".plots{display:flex;flex-wrap:wrap;gap:12px}pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:300px}" +
		"pre.transcript{max-height:600px;font-size:12px}" +
		"</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>%s</h1>\n", esc(title))
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "<p>%s</p>\n", esc(n))
	}
	for _, t := range p.Tables {
		writeTable(&b, t)
	}
	for _, f := range p.Figures {
		b.WriteString(f)
	}
	for _, r := range p.Runs {
		writeTable(&b, summaryTable(r, panels))
	}
	b.WriteString("<div class=\"plots\">\n")
	var empty []string
	for _, pn := range panels {
		svg, ok := panelSVG(pn, p.Runs)
		if !ok {
			empty = append(empty, pn.Title)
			continue
		}
		b.WriteString(svg)
	}
	for _, c := range p.Curves {
		if svg, ok := panelSVG(c.Panel, c.Runs); ok {
			b.WriteString(svg)
		}
	}
	b.WriteString("</div>\n")
	for _, t := range p.Texts {
		fmt.Fprintf(&b, "<h2>%s</h2>\n<pre class=\"transcript\">%s</pre>\n", esc(t.Title), esc(t.Body))
	}
	if len(empty) > 0 {
		fmt.Fprintf(&b, "<p>No data for: %s.</p>\n", esc(strings.Join(empty, "; ")))
	}
	for _, r := range p.Runs {
		if r.Config != "" {
			fmt.Fprintf(&b, "<h2>Config of %s</h2>\n<pre>%s</pre>\n", esc(r.Name), esc(r.Config))
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func summaryTable(r Run, panels []Panel) Table {
	t := Table{Caption: fmt.Sprintf("%s: %d iterations", r.Name, len(r.Records)), Header: []string{"metric", "first", "last", "min", "max"}}
	seen := map[string]bool{}
	for _, pn := range panels {
		for _, s := range pn.Series {
			if seen[s.Key] {
				continue
			}
			seen[s.Key] = true
			pts := points(r.Records, s.Key)
			if len(pts) == 0 {
				continue
			}
			lo, hi := pts[0].y, pts[0].y
			for _, q := range pts {
				lo, hi = math.Min(lo, q.y), math.Max(hi, q.y)
			}
			t.Rows = append(t.Rows, []string{s.Key, num(pts[0].y), num(pts[len(pts)-1].y), num(lo), num(hi)})
		}
	}
	return t
}

func writeTable(b *strings.Builder, t Table) {
	b.WriteString("<table>")
	if t.Caption != "" {
		fmt.Fprintf(b, "<caption>%s</caption>", esc(t.Caption))
	}
	if len(t.Header) > 0 {
		b.WriteString("<tr>")
		for _, h := range t.Header {
			fmt.Fprintf(b, "<th>%s</th>", esc(h))
		}
		b.WriteString("</tr>")
	}
	for _, row := range t.Rows {
		b.WriteString("<tr>")
		for _, c := range row {
			fmt.Fprintf(b, "<td>%s</td>", esc(c))
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>\n")
}

type point struct{ x, y float64 }

// points returns (iteration, value) for the records that have key; the x is
// the record's "iteration" field when present, else its index.
func points(recs []Record, key string) []point {
	var pts []point
	for i, r := range recs {
		y, ok := r[key]
		if !ok {
			continue
		}
		x := float64(i)
		if it, ok := r["iteration"]; ok {
			x = it
		}
		pts = append(pts, point{x, y})
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].x < pts[j].x })
	return pts
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

const (
	plotW, plotH                     = 520, 280
	padL, padR, padT, padB           = 60, 12, 28, 70
	innerW, innerH                   = plotW - padL - padR, plotH - padT - padB
	legendRowH, legendColW, legendX0 = 14, 250, 8
)

type line struct {
	label string
	pts   []point
}

// panelSVG draws one panel; ok is false when no run has any of its series.
func panelSVG(pn Panel, runs []Run) (string, bool) {
	var lines []line
	for _, r := range runs {
		for _, s := range pn.Series {
			pts := points(r.Records, s.Key)
			if len(pts) == 0 {
				continue
			}
			label := s.Label
			if len(runs) > 1 {
				label = r.Name + ": " + s.Label
			}
			lines = append(lines, line{label, pts})
		}
	}
	if len(lines) == 0 {
		return "", false
	}
	x0, x1 := math.Inf(1), math.Inf(-1)
	y0, y1 := math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, p := range l.pts {
			x0, x1 = math.Min(x0, p.x), math.Max(x1, p.x)
			y0, y1 = math.Min(y0, p.y), math.Max(y1, p.y)
		}
	}
	if x1 == x0 {
		x0, x1 = x0-1, x1+1
	}
	if y1 == y0 {
		d := math.Max(math.Abs(y0)*0.1, 0.5)
		y0, y1 = y0-d, y1+d
	}
	yt := niceTicks(y0, y1, 5)
	y0, y1 = math.Min(y0, yt[0]), math.Max(y1, yt[len(yt)-1])
	xt := niceTicks(x0, x1, 6)
	sx := func(x float64) float64 { return padL + (x-x0)/(x1-x0)*innerW }
	sy := func(y float64) float64 { return padT + (1-(y-y0)/(y1-y0))*innerH }

	var b strings.Builder
	legendRows := (len(lines) + 1) / 2
	h := plotH + legendRowH*max(0, legendRows-2)
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-size=\"11\" font-family=\"sans-serif\">\n", plotW, h, plotW, h)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(pn.Title))
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"16\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", padL, esc(pn.Title))
	fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", padL, padT, innerW, innerH)
	for _, t := range yt {
		if t < y0 || t > y1 {
			continue
		}
		y := sy(t)
		fmt.Fprintf(&b, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>", padL, padL+innerW, y, y)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", padL-4, y+4, esc(num(t)))
	}
	for _, t := range xt {
		if t < x0 || t > x1 {
			continue
		}
		x := sx(t)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#999\"/>", x, x, padT+innerH, padT+innerH+4)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, padT+innerH+16, esc(num(t)))
	}
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">iteration</text>\n", padL+innerW/2, padT+innerH+30)
	fmt.Fprintf(&b, "<text transform=\"translate(12 %d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", padT+innerH/2, esc(pn.YLabel))
	for i, l := range lines {
		c := palette[i%len(palette)]
		var path strings.Builder
		for j, p := range l.pts {
			if j > 0 {
				path.WriteByte(' ')
			}
			fmt.Fprintf(&path, "%.1f,%.1f", sx(p.x), sy(p.y))
		}
		if len(l.pts) > 1 {
			fmt.Fprintf(&b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"%s\"/>\n", c, path.String())
		}
		if len(l.pts) <= 40 {
			for _, p := range l.pts {
				fmt.Fprintf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"><title>%s</title></circle>", sx(p.x), sy(p.y), c, esc(fmt.Sprintf("%s @ %s = %s", l.label, num(p.x), num(p.y))))
			}
			b.WriteByte('\n')
		}
		lx := legendX0 + legendColW*(i%2)
		ly := padT + innerH + 46 + legendRowH*(i/2)
		fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", lx, ly-4, c, lx+16, ly, esc(l.label))
	}
	b.WriteString("</svg>\n")
	return b.String(), true
}

// niceTicks returns about n round tick values covering [lo, hi]: steps of
// 1, 2 or 5 times a power of ten.
func niceTicks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return []float64{lo}
	}
	raw := span / float64(max(1, n))
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	start := math.Floor(lo/step) * step
	var out []float64
	for v := start; v <= hi+step*0.5 && len(out) < 100; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// num formats a value compactly: integers plainly, others to 4 significant digits.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

var htmlEsc = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&quot;", "'", "&#39;")

func esc(s string) string { return htmlEsc.Replace(s) }
