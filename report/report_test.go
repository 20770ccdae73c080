package report

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadMetricsKeepsNumbersSkipsOthers(t *testing.T) {
	in := `{"iteration":0,"reward":0.25,"note":"x","ok":true,"arr":[1],"nil":null}

{"iteration":1,"reward":0.5,"eval_pass1_compact":0.4}
`
	recs, err := ReadMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2", len(recs))
	}
	if recs[0]["reward"] != 0.25 || recs[0]["ok"] != 1 {
		t.Errorf("record 0 = %v", recs[0])
	}
	for _, k := range []string{"note", "arr", "nil"} {
		if _, ok := recs[0][k]; ok {
			t.Errorf("non-numeric field %q kept", k)
		}
	}
	if _, ok := recs[0]["eval_pass1_compact"]; ok {
		t.Error("missing field must stay missing, not zero")
	}
	if recs[1]["eval_pass1_compact"] != 0.4 {
		t.Errorf("record 1 = %v", recs[1])
	}
}

func TestReadMetricsBadLineNamesIt(t *testing.T) {
	_, err := ReadMetrics(strings.NewReader("{\"a\":1}\n{not json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}

func TestPointsSkipsMissingAndUsesIteration(t *testing.T) {
	recs := []Record{{"iteration": 5, "a": 1}, {"iteration": 6}, {"iteration": 7, "a": 3}}
	pts := points(recs, "a")
	if len(pts) != 2 || pts[0] != (point{5, 1}) || pts[1] != (point{7, 3}) {
		t.Fatalf("points = %v", pts)
	}
}

func TestNiceTicks(t *testing.T) {
	got := niceTicks(0, 1, 5)
	want := []float64{0, 0.2, 0.4, 0.6, 0.8, 1}
	if len(got) != len(want) {
		t.Fatalf("ticks = %v, want %v", got, want)
	}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-12 || d < -1e-12 {
			t.Fatalf("ticks = %v, want %v", got, want)
		}
	}
	if g := niceTicks(3, 3, 5); len(g) != 1 {
		t.Errorf("degenerate range ticks = %v", g)
	}
}

// The output must be well-formed XML (the HTML is written as XHTML-compatible
// markup), so a strict parser catches unescaped text and broken SVG.
func wellFormed(t *testing.T, html string) {
	t.Helper()
	body := strings.TrimPrefix(html, "<!DOCTYPE html>\n")
	d := xml.NewDecoder(strings.NewReader(body))
	d.Strict = true
	for {
		_, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				return
			}
			t.Fatalf("report is not well-formed: %v", err)
		}
	}
}

func TestWriteHTMLRendersPlotsAndEscapes(t *testing.T) {
	run := Run{Name: "r<1>", Config: "suite: {name: \"a&b\"}\n", Records: []Record{
		{"iteration": 0, "reward": 0.1, "eval_pass1_compact": 0.2, "eval_pass1_single": 0.1, "summary_quality": 0.5},
		{"iteration": 1, "reward": 0.3},
		{"iteration": 2, "reward": 0.6, "eval_pass1_compact": 0.5, "eval_pass1_single": 0.2, "summary_quality": 0.7},
	}}
	var sb strings.Builder
	p := Page{Title: "T <script>", Notes: []string{"a & b"}, Runs: []Run{run},
		Tables: []Table{{Caption: "c", Header: []string{"arm", "pass@1"}, Rows: [][]string{{"x<y", "0.5"}}}}}
	if err := WriteHTML(&sb, p); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	wellFormed(t, out)
	for _, bad := range []string{"<script>", "r<1>", "x<y", "a&b"} {
		if strings.Contains(out, bad) {
			t.Errorf("unescaped %q in output", bad)
		}
	}
	for _, want := range []string{"T &lt;script&gt;", "Held-out pass@1", "Summary quality", "<polyline", "with compaction", "No data for:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if n := strings.Count(out, "<svg"); n != 3 {
		t.Errorf("%d plots, want 3 (reward, pass@1, summary quality)", n)
	}
}

func TestWriteHTMLEmptyRun(t *testing.T) {
	var sb strings.Builder
	if err := WriteHTML(&sb, Page{Runs: []Run{{Name: "empty"}}}); err != nil {
		t.Fatal(err)
	}
	wellFormed(t, sb.String())
	if strings.Contains(sb.String(), "<svg") {
		t.Error("an empty run must render no plot")
	}
	if !strings.Contains(sb.String(), "0 iterations") {
		t.Error("empty run summary missing")
	}
}

func TestWriteHTMLMultipleRunsLabelsByRun(t *testing.T) {
	a := Run{Name: "arm-a", Records: []Record{{"iteration": 0, "reward": 1}}}
	b := Run{Name: "arm-b", Records: []Record{{"iteration": 0, "reward": 2}, {"iteration": 1, "reward": 2}}}
	var sb strings.Builder
	if err := WriteHTML(&sb, Page{Runs: []Run{a, b}}); err != nil {
		t.Fatal(err)
	}
	wellFormed(t, sb.String())
	for _, want := range []string{"arm-a: reward", "arm-b: reward"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("lacks legend %q", want)
		}
	}
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(dir); err == nil {
		t.Fatal("missing metrics.jsonl must be an error")
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(`{"iteration":0,"reward":0.5}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("seed: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, string(b))
	if !strings.Contains(string(b), "seed: 1") {
		t.Error("config not shown")
	}
}

func TestGenerateShowsBeforeAfterCurvesAndTranscripts(t *testing.T) {
	dir := t.TempDir()
	metrics := `{"iteration":0,"reward":0.1,"eval_pass1_compact":0.25,"eval_pass1_single":0.1,"eval_episodes":100,"eval_summary_quality":0.5,"eval_compactions":1.5}
{"iteration":1,"reward":0.2}
{"iteration":2,"eval_pass1_compact":0.5,"eval_pass1_single":0.125,"eval_episodes":100}
`
	var curve strings.Builder
	for i := range 60 {
		phase := "copy"
		if i >= 30 {
			phase = "sft"
		}
		fmt.Fprintf(&curve, `{"phase":%q,"step":%d,"loss":%g,"recall_loss":0.5}`+"\n", phase, i%30, 3-float64(i)/30)
	}
	files := map[string]string{
		"metrics.jsonl":               metrics,
		"pretrain.jsonl":              curve.String(),
		"transcripts/eval-000000.txt": "before <summary> kept: (none)",
		"transcripts/eval-000010.txt": "intermediate-transcript",
		"transcripts/final.txt":       "after kept: delta 25",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	html := string(b)
	// 25/100 → Wilson [0.175, 0.343]; 50/100 → [0.404, 0.596].
	for _, want := range []string{"before RL", "after RL", "0.250 [0.175, 0.343]", "0.500 [0.404, 0.596]",
		"Pretraining loss (pretrain.jsonl)", "sft (recall sequences)", "before &lt;summary&gt; kept: (none)", "after kept: delta 25"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(html, "intermediate-transcript") {
		t.Error("report shows an intermediate transcript; want the first and the final")
	}
	if err := xml.Unmarshal([]byte(strings.Replace(html, "<!DOCTYPE html>", "", 1)), new(any)); err != nil {
		t.Errorf("report is not well-formed: %v", err)
	}
}
