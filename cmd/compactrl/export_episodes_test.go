package main

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

func runExportOut(t *testing.T, args ...string) ([]map[string]any, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := runExportEpisodes(context.Background(), env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, args)
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
	return recs, errb.String(), err
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

const exportFixture = "testdata/export_episodes.jsonl"

func TestExportVerl(t *testing.T) {
	recs, log, err := runExportOut(t, "--format", "verl", "-in", exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	// ep-a: segments 0 and 2 (1 is not trainable); ep-b overlong and ep-c
	// infra_error left out; ep-d: segment 0 (segment 1 has no optimised token).
	if len(recs) != 3 || !strings.Contains(log, "4 episodes read, 2 left out") {
		t.Fatalf("%d records, log %q", len(recs), log)
	}
	r := recs[0]
	if r["uid"] != "task-1" || r["episode_id"] != "ep-a" || r["segment_index"] != 0.0 || r["num_segments"] != 2.0 || r["kind"] != "summary" || r["reward"] != 1.0 {
		t.Fatalf("record 0 header: %v", r)
	}
	if got := ints(r["input_ids"]); !reflect.DeepEqual(got, []int{1, 2, 3, 10, 11, 12, 13, 14}) {
		t.Fatalf("input_ids %v", got)
	}
	if !reflect.DeepEqual(ints(r["prompts"]), []int{1, 2, 3}) || !reflect.DeepEqual(ints(r["responses"]), []int{10, 11, 12, 13, 14}) {
		t.Fatalf("prompts/responses %v %v", r["prompts"], r["responses"])
	}
	if !reflect.DeepEqual(ints(r["response_mask"]), []int{1, 1, 0, 1, 0}) ||
		!reflect.DeepEqual(ints(r["attention_mask"]), []int{1, 1, 1, 1, 1, 1, 1, 1}) ||
		!reflect.DeepEqual(ints(r["position_ids"]), []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("masks %v %v %v", r["response_mask"], r["attention_mask"], r["position_ids"])
	}
	// R sits at the last optimised token (index 3), not at the last token.
	if got := floats(r["token_level_rewards"]); !reflect.DeepEqual(got, []float64{0, 0, 0, 1, 0}) {
		t.Fatalf("token_level_rewards %v", got)
	}
	if !reflect.DeepEqual(floats(r["old_log_probs"]), []float64{-0.5, -0.25, 0, -1, 0}) ||
		!reflect.DeepEqual(floats(r["rollout_log_probs"]), floats(r["old_log_probs"])) ||
		!reflect.DeepEqual(floats(r["advantages"]), []float64{0.9, 0.8, 0, 0.7, 0}) ||
		!reflect.DeepEqual(floats(r["returns"]), []float64{1, 1, 0, 1, 0}) ||
		!reflect.DeepEqual(floats(r["values"]), []float64{0.1, 0.2, 0.2, 0.3, 0.3}) {
		t.Fatalf("per-token arrays: %v", r)
	}
	if recs[1]["segment_index"] != 2.0 || recs[2]["uid"] != "ep-d" || len(floats(recs[2]["values"])) != 0 {
		t.Fatalf("records 1, 2: %v / %v", recs[1], recs[2])
	}
}

func TestExportSlime(t *testing.T) {
	recs, _, err := runExportOut(t, "--format", "slime", "-in", exportFixture, "-keep-overlong")
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
		rollout      string
		status       string
	}{{0, 0, "ep-a", "completed"}, {0, 1, "ep-a", "completed"}, {0, 2, "ep-b", "truncated"}, {1, 3, "ep-d", "completed"}}
	for i, w := range want {
		m := recs[i]["metadata"].(map[string]any)
		if recs[i]["group_index"] != w.group || recs[i]["index"] != w.index || m["rollout_id"] != w.rollout || recs[i]["status"] != w.status {
			t.Errorf("record %d: group %v index %v rollout %v status %v, want %+v", i, recs[i]["group_index"], recs[i]["index"], m["rollout_id"], recs[i]["status"], w)
		}
	}
	if m := recs[1]["metadata"].(map[string]any); !reflect.DeepEqual(floats(m["advantages"]), []float64{0.5, 0, 0.4}) || m["segment_index"] != 2.0 {
		t.Fatalf("record 1 metadata %v", m)
	}
}

func TestExportJSONLKeepsSegments(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "segs.jsonl")
	if _, _, err := runExportOut(t, "--format", "jsonl", "-in", exportFixture, "-out", out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
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
	if _, _, err := runExportOut(t, "--format", "parquet", "-in", exportFixture); err == nil {
		t.Fatal("unknown format accepted")
	}
	dir := t.TempDir()
	noAdv := filepath.Join(dir, "noadv.jsonl")
	os.WriteFile(noAdv, []byte(`{"id":"x","task":"t","reward":1,"status":"ok","segments":[{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2],"loss_mask":[1],"logprobs":[-1]}]}`+"\n"), 0o644)
	if _, _, err := runExportOut(t, "--format", "verl", "-in", noAdv); err == nil || !strings.Contains(err.Error(), "advantages") {
		t.Fatalf("missing advantages: %v", err)
	}
	if recs, _, err := runExportOut(t, "--format", "verl", "-in", noAdv, "-allow-missing-advantages"); err != nil || len(recs) != 1 {
		t.Fatalf("allowed missing advantages: %d records, %v", len(recs), err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"id\":\"x\"}\n"), 0o644)
	if _, _, err := runExportOut(t, "--format", "verl", "-in", bad); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad line: %v", err)
	}
}

// The CLI reaches the episode export through `compactrl export --format`.
func TestExportEpisodesThroughCLI(t *testing.T) {
	f, err := os.Open(exportFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), env{stdin: f, stdout: &out, stderr: &errb}, []string{"export", "--format", "slime"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Fatalf("%d records from stdin, want 3", n)
	}
}
