package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Checkpoint layout, under RUN_DIR/checkpoints/:
//
//	iter-NNNNNN/policy/   the policy's weights and optimiser state (Model.Save)
//	iter-NNNNNN/critic/   the critic's
//	iter-NNNNNN/state.json   State: seed, next iteration, step counters
//	iter-NNNNNN/config.yaml  the run's config (Trainer.ConfigYAML)
//	latest                   the name of the newest complete checkpoint
//
// NNNNNN is the next iteration to run (000000: right after the warm start).
// A checkpoint is written under a temporary name and renamed when
// complete, so a run killed while saving leaves the previous one intact.
const keepCheckpoints = 2

func (t *Trainer) checkpointsDir() string { return filepath.Join(t.Cfg.Run.Dir, "checkpoints") }

func (t *Trainer) checkpoint() error {
	root := t.checkpointsDir()
	name := fmt.Sprintf("iter-%06d", t.state.Iteration)
	dir := filepath.Join(root, name)
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	for _, sub := range []string{"policy", "critic"} {
		if err := os.MkdirAll(filepath.Join(tmp, sub), 0o755); err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
	}
	if err := t.Policy.Save(filepath.Join(tmp, "policy")); err != nil {
		return fmt.Errorf("checkpoint %s: policy: %w", dir, err)
	}
	if err := t.critic.Save(filepath.Join(tmp, "critic")); err != nil {
		return fmt.Errorf("checkpoint %s: critic: %w", dir, err)
	}
	st, _ := json.MarshalIndent(t.state, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "state.json"), append(st, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	y, err := t.configYAML()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config.yaml"), y, 0o644); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := writeAtomic(filepath.Join(root, "latest"), []byte(name+"\n")); err != nil {
		return err
	}
	return t.pruneCheckpoints(name)
}

// pruneCheckpoints keeps the newest keepCheckpoints complete checkpoints.
func (t *Trainer) pruneCheckpoints(latest string) error {
	ents, err := os.ReadDir(t.checkpointsDir())
	if err != nil {
		return fmt.Errorf("checkpoints %s: %w", t.checkpointsDir(), err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "iter-") && !strings.HasSuffix(e.Name(), ".partial") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for len(names) > keepCheckpoints {
		if names[0] != latest {
			if err := os.RemoveAll(filepath.Join(t.checkpointsDir(), names[0])); err != nil {
				return fmt.Errorf("checkpoints: %w", err)
			}
		}
		names = names[1:]
	}
	return nil
}

// LatestCheckpoint returns the directory of the run's newest complete
// checkpoint.
func LatestCheckpoint(runDir string) (string, error) {
	root := filepath.Join(runDir, "checkpoints")
	b, err := os.ReadFile(filepath.Join(root, "latest"))
	if err != nil {
		return "", fmt.Errorf("run %s has no checkpoint: %w", runDir, err)
	}
	return filepath.Join(root, strings.TrimSpace(string(b))), nil
}

// readState reads a checkpoint's state.json.
func readState(ckpt string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(ckpt, "state.json"))
	if err != nil {
		return st, fmt.Errorf("checkpoint %s: %w", ckpt, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("checkpoint %s/state.json: %w", ckpt, err)
	}
	return st, nil
}

// restore loads the latest checkpoint if the run has one; ok is false for
// a run that has none yet (it then starts from the beginning).
func (t *Trainer) restore(ctx context.Context) (ok bool, err error) {
	ckpt, err := LatestCheckpoint(t.Cfg.Run.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, err := readState(ckpt)
	if err != nil {
		return false, err
	}
	if st.Seed != t.Cfg.Seed {
		return false, fmt.Errorf("resume %s: checkpoint seed %d differs from config seed %d", ckpt, st.Seed, t.Cfg.Seed)
	}
	if err := t.Policy.Load(filepath.Join(ckpt, "policy")); err != nil {
		return false, fmt.Errorf("resume %s: policy: %w", ckpt, err)
	}
	if err := t.Policy.Publish(ctx); err != nil {
		return false, fmt.Errorf("resume %s: publish: %w", ckpt, err)
	}
	if t.critic, err = t.NewCritic(ctx, t.Policy); err != nil {
		return false, fmt.Errorf("resume %s: new critic: %w", ckpt, err)
	}
	if err := t.critic.Load(filepath.Join(ckpt, "critic")); err != nil {
		return false, fmt.Errorf("resume %s: critic: %w", ckpt, err)
	}
	t.state = st
	return true, nil
}

// ResolveCheckpoint accepts a checkpoint directory (holding state.json) or
// a run directory (its latest checkpoint) and returns the checkpoint's.
func ResolveCheckpoint(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err == nil {
		return dir, nil
	}
	ckpt, err := LatestCheckpoint(dir)
	if err != nil {
		return "", fmt.Errorf("%s is neither a checkpoint (no state.json) nor a run directory with one: %w", dir, err)
	}
	return ckpt, nil
}

// CheckpointTokenizers are the places a checkpoint's tokenizer.json may
// be, nearest first: the checkpoint directory, its parent (a base policy
// directory or a run's policy), and the run directory of a training
// checkpoint RUN/checkpoints/iter-N/policy.
func CheckpointTokenizers(ckpt string) []string {
	ckpt = filepath.Clean(ckpt)
	out := []string{filepath.Join(ckpt, "tokenizer.json"), filepath.Join(filepath.Dir(ckpt), "tokenizer.json")}
	iter := filepath.Dir(ckpt)
	if filepath.Base(ckpt) == "policy" && strings.HasPrefix(filepath.Base(iter), "iter-") && filepath.Base(filepath.Dir(iter)) == "checkpoints" {
		out = append(out, filepath.Join(filepath.Dir(filepath.Dir(iter)), "tokenizer.json"))
	}
	return out
}
