package eval

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/train"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// checkGolden compares got with testdata/name (rewriting it with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// nopSink accepts every episode.
type nopSink struct{}

func (nopSink) Write(*episode.Episode) error { return nil }

// goldenEpisodes are episodes of every kind results.json counts: ok with
// full, partial and zero reward, with and without compactions, infra_error,
// verifier_error, a reward note, a close error and a long final
// observation.
func goldenEpisodes() []episode.Episode {
	ep := func(id, group string, st episode.Status, reward, compactions float64, meta map[string]string) episode.Episode {
		return episode.Episode{ID: id, Group: group, Status: st, Reward: reward, Meta: meta,
			Metrics: map[string]float64{agent.MetricCompactions: compactions, agent.MetricTurns: 3 + compactions}}
	}
	long := strings.Repeat("FAILED test_case line\n", 40)
	return []episode.Episode{
		ep("beta#1", "beta", episode.StatusOK, 1, 0, nil),
		ep("alpha#0", "alpha", episode.StatusOK, 1, 2, nil),
		ep("alpha#1", "alpha", episode.StatusOK, 0.5, 1, map[string]string{agent.MetaFinalObservation: long}),
		ep("beta#0", "beta", episode.StatusOK, 0, 0, map[string]string{MetaRewardNote: "reward.txt holds \"abc\"", agent.MetaFinalObservation: "1 failed"}),
		ep("gamma#0", "gamma", episode.StatusInfraError, 0, 0, map[string]string{agent.MetaError: "engine: connection refused"}),
		ep("gamma#1", "gamma", episode.StatusVerifierError, 0, 1, map[string]string{agent.MetaError: "verifier timed out", MetaCloseError: "workspace busy"}),
		ep("delta#0", "delta", episode.StatusOverlong, 0, 4, map[string]string{agent.MetaFinalObservation: "window full"}),
		ep("delta#1", "delta", episode.StatusOK, 1, 1, nil),
	}
}

// The results.json eval writes and the table it prints, for a fixed set of
// episodes. The golden files were written by the aggregation before it
// moved out of package main: they hold the file format and the printed
// table to the byte.
func TestResultsGolden(t *testing.T) {
	names := []string{"alpha", "beta", "delta", "gamma", "never-played"}
	skipped := []tasks.Skipped{{Task: "needs-image", Reason: "needs its container image\n(environment/Dockerfile)"}}
	meta := map[string]string{"policy": "engine", "tasks": "tasks/", "context": "4096"}
	for _, c := range []struct {
		name     string
		eps      []episode.Episode
		attempts int
		names    []string
		skipped  []tasks.Skipped
	}{
		{"repeated", goldenEpisodes(), 2, names, skipped},
		{"single", goldenEpisodes()[:4:4], 1, names[:2], nil},
		{"unscored", goldenEpisodes()[4:6:6], 2, names[3:4], nil},
		{"nothing-runnable", nil, 3, nil, skipped},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &Collector{Next: nopSink{}}
			for i := range c.eps {
				if err := sink.Write(&c.eps[i]); err != nil {
					t.Fatal(err)
				}
			}
			res := Summarize(sink.Verdicts(), c.names, c.attempts, c.skipped, meta)
			path := filepath.Join(t.TempDir(), "results.json")
			if err := res.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, c.name+".results.json", b)
			var out bytes.Buffer
			res.WriteTable(&out)
			res.WriteOracleFailures(&out)
			checkGolden(t, c.name+".stdout", out.Bytes())
		})
	}
}

// Summarize leaves the caller's verdicts in their order.
func TestSummarizeKeepsInput(t *testing.T) {
	vs := []Verdict{{ID: "b#0", Task: "b", Status: "ok"}, {ID: "a#0", Task: "a", Status: "ok"}}
	Summarize(vs, nil, 1, nil, nil)
	if vs[0].ID != "b#0" {
		t.Fatalf("verdicts reordered: %+v", vs)
	}
}

// A sink that refuses an episode: the collector records no verdict for it
// and returns the error.
type failSink struct{}

func (failSink) Write(*episode.Episode) error { return fmt.Errorf("disk full") }

func TestCollectorKeepsOnlyWritten(t *testing.T) {
	c := &Collector{Next: failSink{}}
	if err := c.Write(&episode.Episode{ID: "x#0", Status: episode.StatusOK}); err == nil || len(c.Verdicts()) != 0 {
		t.Fatalf("err %v, verdicts %+v", err, c.Verdicts())
	}
}

// An episode file read as an evaluation: outcomes in task-seed order
// whatever order the episodes finished in, infra_error unscored, as the
// outcomes file it would be written to.
func TestReadRunsEpisodeFileGolden(t *testing.T) {
	dir := t.TempDir()
	line := func(seed int, st string, reward float64) string {
		return fmt.Sprintf(`{"id":"vault-%d","task":"t","status":%q,"reward":%g,"segments":[]}`+"\n", seed, st, reward)
	}
	a := filepath.Join(dir, "a.jsonl")
	os.WriteFile(a, []byte(line(12, "ok", 1)+line(10, "ok", 0)+line(11, "infra_error", 0)+line(13, "ok", 0.5)+line(14, "overlong", 0)), 0o644)
	evs, files, err := ReadRuns([]string{a})
	if err != nil || len(evs) != 1 || len(files) != 1 || files[0] != a {
		t.Fatalf("ReadRuns: %v, %d evaluations, files %v", err, len(evs), files)
	}
	outcomes := filepath.Join(dir, "run", "outcomes", "final.json")
	if err := train.WriteOutcomes(outcomes, evs[0]); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(outcomes)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "episodes.outcomes.json", got)
	// The run directory, and a directory of runs, name the same file.
	for _, p := range []string{filepath.Join(dir, "run"), outcomes} {
		if _, files, err := ReadRuns([]string{p}); err != nil || len(files) != 1 || files[0] != outcomes {
			t.Errorf("ReadRuns(%s): %v, files %v", p, err, files)
		}
	}
}

// A directory of runs yields its runs in seed order (seed-10 after
// seed-9); one without any finished run is an error naming it.
func TestReadRunsSeedOrder(t *testing.T) {
	dir := t.TempDir()
	ev := train.EvalResult{Episodes: 1, Range: "dev", Outcomes: []train.Outcome{{TaskSeed: 1, Status: "ok", Scored: true}}}
	for _, s := range []string{"seed-10", "seed-9", "seed-2"} {
		if err := train.WriteOutcomes(train.FinalOutcomes(filepath.Join(dir, s)), ev); err != nil {
			t.Fatal(err)
		}
	}
	_, files, err := ReadRuns([]string{dir})
	if err != nil || len(files) != 3 || !strings.Contains(files[0], "seed-2") || !strings.Contains(files[2], "seed-10") {
		t.Fatalf("%v, %v", err, files)
	}
	empty := t.TempDir()
	if _, _, err := ReadRuns([]string{empty}); err == nil || !strings.Contains(err.Error(), empty) {
		t.Fatalf("empty directory: %v", err)
	}
}
