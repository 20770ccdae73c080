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

// --format verl is refused with an error that points at the service.
func TestExportVerlRemoved(t *testing.T) {
	_, _, err := runExportOut(t, "--format", "verl", "-in", exportFixture)
	if err == nil || !strings.Contains(err.Error(), "compactrl serve") || !strings.Contains(err.Error(), "recomputes") {
		t.Fatalf("verl: %v", err)
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
	if _, _, err := runExportOut(t, "--format", "slime", "-in", noAdv); err == nil || !strings.Contains(err.Error(), "advantages") {
		t.Fatalf("missing advantages: %v", err)
	}
	if recs, _, err := runExportOut(t, "--format", "slime", "-in", noAdv, "-allow-missing-advantages"); err != nil || len(recs) != 1 {
		t.Fatalf("allowed missing advantages: %d records, %v", len(recs), err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"id\":\"x\"}\n"), 0o644)
	if _, _, err := runExportOut(t, "--format", "slime", "-in", bad); err == nil || !strings.Contains(err.Error(), "line 1") {
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
