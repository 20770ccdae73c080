package recipe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/train"
)

// A task whose environment panics or fails is one masked infra_error
// episode, not the end of a training iteration; the others are played.
func TestCollectMasksAFailingEpisode(t *testing.T) {
	cfg := nanoConfig(t)
	cfg.Run.Iterations = 1
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seeds := []int64{11, 12, 13, 14}
	s.Suite.NewEnv = func(seed int64) (agent.Environment, error) {
		switch seed {
		case 12:
			panic("environment bug")
		case 13:
			return nil, errors.New("sandbox could not start")
		}
		return vault.New(s.Suite.Env, seed)
	}
	eps, err := s.Suite.Collect(context.Background(), train.Rollouts{Sampler: s.Policy.Sampler(), Seeds: seeds, SampleSeeds: []int64{1, 2, 3, 4}, Temperature: 1})
	if err != nil {
		t.Fatalf("one failing task ended the collection: %v", err)
	}
	for i, ep := range eps {
		infra := ep.Status == episode.StatusInfraError
		if want := seeds[i] == 12 || seeds[i] == 13; infra != want {
			t.Errorf("seed %d: status %s (%s)", seeds[i], ep.Status, ep.Meta[agent.MetaError])
		}
		if ep.Meta["seed"] != []string{"11", "12", "13", "14"}[i] {
			t.Errorf("episode %d records seed %q", i, ep.Meta["seed"])
		}
	}
	if !strings.Contains(eps[1].Meta[agent.MetaError], "panic: environment bug") || !strings.Contains(eps[2].Meta[agent.MetaError], "sandbox could not start") {
		t.Errorf("errors %q / %q", eps[1].Meta[agent.MetaError], eps[2].Meta[agent.MetaError])
	}
	// A whole run (warm start, iteration, evaluations) goes on with about
	// a third of its tasks failing, and counts them.
	s.Suite.NewEnv = func(seed int64) (agent.Environment, error) {
		if seed%3 == 0 {
			return nil, errors.New("sandbox could not start")
		}
		return vault.New(s.Suite.Env, seed)
	}
	if _, err := s.Trainer.Run(context.Background()); err != nil {
		t.Fatalf("training with failing tasks: %v", err)
	}
	infra := 0.0
	for _, r := range runMetrics(t, cfg.Run.Dir, false) {
		infra += r["infra_errors"]
	}
	if infra == 0 {
		t.Error("no infra_error counted in the metrics")
	}
}

// The training pool's scheduling does not reach the episodes: one worker
// and many (which decode in batches of different make-ups) give the same
// tokens, log-probabilities and rewards, because the built-in engine is
// batch-invariant (model.Decoder).
func TestCollectIsIndependentOfWorkers(t *testing.T) {
	cfg := nanoConfig(t)
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := train.Rollouts{Sampler: s.Policy.Sampler(), Seeds: []int64{3, 3, 5, 8, 13, 21}, SampleSeeds: []int64{1, 2, 3, 4, 5, 6}, Temperature: 1}
	var runs [][]byte
	for _, workers := range []int{1, 6} {
		s.Suite.Workers = workers
		eps, err := s.Suite.Collect(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(eps[0].Segments); n == 0 {
			t.Fatal("an episode with no segment")
		}
		b, err := json.Marshal(eps)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, b)
	}
	if !bytes.Equal(runs[0], runs[1]) {
		t.Error("episodes with 1 and 6 workers differ")
	}
}
