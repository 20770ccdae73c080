package main

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

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/eval")

// checkGolden compares got with testdata/eval/name (rewriting it with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "eval", name)
	if *updateGolden {
		os.MkdirAll(filepath.Dir(path), 0o755)
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
		ep("beta#0", "beta", episode.StatusOK, 0, 0, map[string]string{"reward_note": "reward.txt holds \"abc\"", agent.MetaFinalObservation: "1 failed"}),
		ep("gamma#0", "gamma", episode.StatusInfraError, 0, 0, map[string]string{agent.MetaError: "engine: connection refused"}),
		ep("gamma#1", "gamma", episode.StatusVerifierError, 0, 1, map[string]string{agent.MetaError: "verifier timed out", "close_error": "workspace busy"}),
		ep("delta#0", "delta", episode.StatusOverlong, 0, 4, map[string]string{agent.MetaFinalObservation: "window full"}),
		ep("delta#1", "delta", episode.StatusOK, 1, 1, nil),
	}
}

// The results.json eval writes and the table it prints, for a fixed set of
// episodes: a guard that moving or refactoring the aggregation changes no
// byte of either.
func TestEvalResultsGolden(t *testing.T) {
	runnable := []tasks.Task{{Name: "alpha"}, {Name: "beta"}, {Name: "delta"}, {Name: "gamma"}, {Name: "never-played"}}
	skipped := []tasks.Skipped{{Task: "needs-image", Reason: "needs its container image\n(environment/Dockerfile)"}}
	meta := map[string]string{"policy": "engine", "tasks": "tasks/", "context": "4096"}
	for _, c := range []struct {
		name     string
		eps      []episode.Episode
		attempts int
		runnable []tasks.Task
		skipped  []tasks.Skipped
	}{
		{"repeated", goldenEpisodes(), 2, runnable, skipped},
		{"single", goldenEpisodes()[:4:4], 1, runnable[:2], nil},
		{"unscored", goldenEpisodes()[4:6:6], 2, runnable[3:4], nil},
		{"nothing-runnable", nil, 3, nil, skipped},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &verdictSink{inner: nopSink{}}
			for i := range c.eps {
				if err := sink.Write(&c.eps[i]); err != nil {
					t.Fatal(err)
				}
			}
			res := summarize(sink.verdicts, c.runnable, c.attempts, c.skipped, meta)
			path := filepath.Join(t.TempDir(), "results.json")
			if err := writeJSON(path, res); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, c.name+".results.json", b)
			var out bytes.Buffer
			printResults(&out, res)
			printOracleFailures(&out, res)
			checkGolden(t, c.name+".stdout", out.Bytes())
		})
	}
}

// The outcomes eval compare reads from an episode file, as the outcomes
// file they would be written to, and the comparison it prints.
func TestEvalCompareGolden(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	line := func(seed int, st string, reward float64) string {
		return fmt.Sprintf(`{"id":"vault-%d","task":"t","status":%q,"reward":%g,"segments":[]}`+"\n", seed, st, reward)
	}
	a := write("a.jsonl", line(12, "ok", 1)+line(10, "ok", 0)+line(11, "infra_error", 0)+line(13, "ok", 0.5)+line(14, "overlong", 0))
	b := write("b.jsonl", line(10, "ok", 1)+line(11, "ok", 1)+line(12, "ok", 1)+line(13, "verifier_error", 0)+line(14, "ok", 1))
	ev, err := episodeOutcomes(a)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := filepath.Join(dir, "run", "outcomes", "final.json")
	if err := train.WriteOutcomes(outcomes, ev); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(outcomes)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "compare.outcomes.json", got)
	// An arm read from a run directory (its outcomes/final.json) pairs
	// with one read from an episode file.
	stdout, stderr, code := runCmd(t, "eval", "compare", "run="+filepath.Join(dir, "run"), "b="+b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkGolden(t, "compare.stdout", []byte(stdout))
}
