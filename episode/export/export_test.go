package export

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// runExport exports the episodes of file in as format f.
func runExport(t *testing.T, in string, o Options) ([]map[string]any, Counts, error) {
	t.Helper()
	var out bytes.Buffer
	fh, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	o.Source = in
	c, err := Write(context.Background(), episode.NewReader(fh), &out, o)
	var recs []map[string]any
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	return recs, c, err
}

func ints(v any) []int {
	var out []int
	for _, x := range v.([]any) {
		out = append(out, int(x.(float64)))
	}
	return out
}

func floats(v any) []float64 {
	var out []float64
	for _, x := range v.([]any) {
		out = append(out, x.(float64))
	}
	return out
}

const exportFixture = "testdata/episodes.jsonl"

func TestParseFormat(t *testing.T) {
	if _, err := ParseFormat("verl"); err == nil || !strings.Contains(err.Error(), "compactrl serve") || !strings.Contains(err.Error(), "recomputes") {
		t.Fatalf("verl: %v", err)
	}
	if _, err := ParseFormat("parquet"); err == nil {
		t.Fatal("unknown format accepted")
	}
	if f, err := ParseFormat("slime"); err != nil || f != Slime {
		t.Fatalf("slime: %v %v", f, err)
	}
}

func TestExportSlime(t *testing.T) {
	recs, _, err := runExport(t, exportFixture, Options{Format: Slime, KeepOverlong: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4 (overlong kept)", len(recs))
	}
	r := recs[0]
	if !reflect.DeepEqual(ints(r["tokens"]), []int{1, 2, 3, 10, 11, 12, 13, 14}) || r["response_length"] != 5.0 ||
		!reflect.DeepEqual(ints(r["loss_mask"]), []int{1, 1, 0, 1, 0}) ||
		!reflect.DeepEqual(floats(r["rollout_log_probs"]), []float64{-0.5, -0.25, 0, -1, 0}) ||
		r["reward"] != 1.0 || r["status"] != "completed" || r["prompt"] != "find the key" {
		t.Fatalf("record 0: %v", r)
	}
	want := []struct {
		group, index float64
		rollout      float64 // top-level integer, shared by an episode's segments
		episode      string
		status       string
	}{{0, 0, 0, "ep-a", "completed"}, {0, 1, 0, "ep-a", "completed"}, {0, 2, 1, "ep-b", "truncated"}, {1, 3, 3, "ep-d", "completed"}}
	for i, w := range want {
		m := recs[i]["metadata"].(map[string]any)
		if recs[i]["group_index"] != w.group || recs[i]["index"] != w.index || recs[i]["rollout_id"] != w.rollout ||
			m["episode_id"] != w.episode || recs[i]["status"] != w.status {
			t.Errorf("record %d: group %v index %v rollout_id %v episode %v status %v, want %+v", i, recs[i]["group_index"], recs[i]["index"], recs[i]["rollout_id"], m["episode_id"], recs[i]["status"], w)
		}
	}
	if m := recs[1]["metadata"].(map[string]any); !reflect.DeepEqual(floats(m["advantages"]), []float64{0.5, 0, 0.4}) || m["segment_index"] != 2.0 {
		t.Fatalf("record 1 metadata %v", m)
	}
}

func TestExportJSONLKeepsSegments(t *testing.T) {
	var b bytes.Buffer
	fh, err := os.Open(exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := Write(context.Background(), episode.NewReader(fh), &b, Options{Format: JSONL, Source: exportFixture}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	f, _ := os.Open(exportFixture)
	defer f.Close()
	ep, err := episode.NewReader(f).Next()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		EpisodeID    string `json:"episode_id"`
		SegmentIndex int    `json:"segment_index"`
		episode.Segment
	}
	if err := json.Unmarshal([]byte(lines[1]), &got); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || got.EpisodeID != "ep-a" || got.SegmentIndex != 2 || !reflect.DeepEqual(got.Segment, ep.Segments[2]) {
		t.Fatalf("%d lines; line 1 = %+v, want segment %+v", len(lines), got, ep.Segments[2])
	}
}

func TestExportErrors(t *testing.T) {
	dir := t.TempDir()
	noAdv := filepath.Join(dir, "noadv.jsonl")
	os.WriteFile(noAdv, []byte(`{"id":"x","task":"t","reward":1,"status":"ok","segments":[{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2],"loss_mask":[1],"logprobs":[-1]}]}`+"\n"), 0o644)
	if _, _, err := runExport(t, noAdv, Options{Format: Slime}); err == nil || !strings.Contains(err.Error(), "advantages") {
		t.Fatalf("missing advantages: %v", err)
	}
	if recs, _, err := runExport(t, noAdv, Options{Format: Slime, AllowNoAdv: true}); err != nil || len(recs) != 1 {
		t.Fatalf("allowed missing advantages: %d records, %v", len(recs), err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"id\":\"x\"}\n"), 0o644)
	if _, _, err := runExport(t, bad, Options{Format: Slime}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad line: %v", err)
	}
}

// The masking rule is rl.Masked's: infra_error and verifier_error episodes
// are never exported, overlong ones only when kept.
func TestExportMasksAsTheTrainerDoes(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "eps.jsonl")
	seg := `"segments":[{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2],"loss_mask":[1],"logprobs":[-1],"advantages":[0.5]}]`
	var lines []string
	for _, st := range []string{"ok", "format_error", "overlong", "infra_error", "verifier_error"} {
		lines = append(lines, `{"id":"`+st+`","task":"t","reward":0,"status":"`+st+`",`+seg+`}`)
	}
	os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	for _, keep := range []bool{false, true} {
		recs, c, err := runExport(t, in, Options{Format: JSONL, KeepOverlong: keep})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, r["status"].(string))
		}
		want := []string{"ok", "format_error"}
		if keep {
			want = append(want, "overlong")
		}
		if !reflect.DeepEqual(got, want) || c.Skipped != 5-len(want) || c.Episodes != 5 {
			t.Fatalf("keep overlong %v: exported %v (counts %+v), want %v", keep, got, c, want)
		}
	}
}
