package recipe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/stats"
	"github.com/compactrl/compactrl/train"
)

// A base policy directory is what `compactrl pretrain` writes and what RL
// starts from (docs/design.md §8): a Hugging Face-style checkpoint that also
// records the suite and agent it was trained for, so that it evaluates and
// trains on its own.
//
//	model.safetensors, config.json   the policy (model.Save)
//	tokenizer.json                   its tokenizer
//	model.gguf                       instead of the three above, for a model
//	                                 imported from GGUF (model.init names a
//	                                 .gguf): policy, tokenizer and chat
//	                                 template in one F32 GGUF, which
//	                                 llama-server also serves
//	compactrl.yaml                   the full recipe (Config) it was pretrained with
//	pretrain.jsonl                   one SFTRecord per warm-start step (the curves)
//	eval.json                        BaseInfo: held-out metrics, command, commit, wall time
//	README.md                        the model card
const (
	BaseGGUFFile   = "model.gguf"
	BaseConfigFile = "compactrl.yaml"
	BaseInfoFile   = "eval.json"
	BaseCurveFile  = "pretrain.jsonl"
)

// BaseInfo is how a base policy was made and how it scores.
type BaseInfo struct {
	Command    string  `json:"command"`
	Commit     string  `json:"commit"`
	KernelPath string  `json:"kernel_path"`
	Threads    int     `json:"threads"`
	WallS      float64 `json:"wall_s"`
	Created    string  `json:"created"`
	Seed       int64   `json:"seed"`
	Vocab      int     `json:"vocab"`
	// InitFrom is the GGUF the policy was imported from before its warm
	// start ("" for a policy trained from random weights).
	InitFrom string           `json:"init_from,omitempty"`
	Params   int              `json:"params"`
	Eval     train.EvalResult `json:"eval"`
	// PhaseLoss is the mean loss over the last 100 steps of each warm-start
	// phase (copy, recall, sft), and for sft the mixed-in recall loss.
	PhaseLoss map[string]float64 `json:"phase_loss"`
}

// isBase reports whether dir is a base policy directory.
func isBase(dir string) bool {
	_, err1 := os.Stat(filepath.Join(dir, BaseConfigFile))
	_, err2 := os.Stat(filepath.Join(dir, model.WeightsFile))
	_, err3 := os.Stat(filepath.Join(dir, BaseGGUFFile))
	return err1 == nil && (err2 == nil || err3 == nil)
}

// LoadBase reads a base policy directory's recipe and returns the config
// that continues from it: the same model, suite and agent, the policy
// initialised from dir with its tokenizer, and no warm-start phase.
func LoadBase(dir string) (Config, error) {
	cfg, err := LoadConfig(filepath.Join(dir, BaseConfigFile))
	if err != nil {
		return cfg, fmt.Errorf("base policy %s: %w", dir, err)
	}
	cfg.Model.Init = dir
	cfg.Model.Tokenizer = filepath.Join(dir, TokenizerFile)
	if g := filepath.Join(dir, BaseGGUFFile); fileExists(g) {
		cfg.Model.Init, cfg.Model.Tokenizer = g, g
	}
	cfg.SFT.NoWarmStart()
	return cfg, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// FromBase returns rl with the suite, agent and model of the base policy
// in dir: RL settings and the run come from rl, and they must agree with
// the base on everything the policy was trained for.
func FromBase(dir string, rlCfg Config) (Config, error) {
	base, err := LoadBase(dir)
	if err != nil {
		return rlCfg, err
	}
	if rlCfg.Suite != base.Suite {
		return rlCfg, fmt.Errorf("base policy %s was trained for suite %+v, the config asks for %+v", dir, base.Suite, rlCfg.Suite)
	}
	if rlCfg.Agent.Context != base.Agent.Context || rlCfg.Agent.MaxSummaryTokens != base.Agent.MaxSummaryTokens || rlCfg.Agent.Reserve != base.Agent.Reserve {
		return rlCfg, fmt.Errorf("base policy %s was trained for window %d / reserve %d / summaries of %d tokens, the config asks for %d / %d / %d",
			dir, base.Agent.Context, base.Agent.Reserve, base.Agent.MaxSummaryTokens, rlCfg.Agent.Context, rlCfg.Agent.Reserve, rlCfg.Agent.MaxSummaryTokens)
	}
	c := rlCfg
	c.Model = base.Model
	c.SFT.NoWarmStart()
	return c, nil
}

// Commit is the VCS revision the running binary was built from ("unknown"
// when the build recorded none, e.g. `go run` outside a repository), with
// "+dirty" for uncommitted changes.
func Commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// WriteBase writes the base policy directory out from a finished
// pretraining run (s, its result res): weights, tokenizer, recipe, curves,
// BaseInfo and the model card.
func WriteBase(ctx context.Context, out string, s *Setup, res train.Result, info BaseInfo) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	if err := savePolicy(out, s); err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	recipe := s.Cfg
	if format.IsGGUF(s.Cfg.Model.Init) {
		info.InitFrom = s.Cfg.Model.Init
	}
	recipe.Model.Init, recipe.Model.Tokenizer = "", ""
	recipe.Run.Dir = out
	y, err := recipe.YAML()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, BaseConfigFile), y, 0o644); err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	curves, err := os.ReadFile(filepath.Join(s.Cfg.Run.Dir, "sft.jsonl"))
	if err != nil {
		return fmt.Errorf("base %s: pretraining curves: %w", out, err)
	}
	if err := os.WriteFile(filepath.Join(out, BaseCurveFile), curves, 0o644); err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	return writeBaseInfo(out, recipe, s.Policy.M, res.After, info, curves)
}

// savePolicy writes the policy and its tokenizer into a base directory:
// model.safetensors, config.json and tokenizer.json, or for a model
// imported from GGUF one F32 model.gguf carrying the GGUF's vocabulary,
// pre-tokenizer and chat template (a pre-tokenizer such as SmolLM2's has no
// tokenizer.json form here).
func savePolicy(out string, s *Setup) error {
	m := s.Policy.M
	if src := s.Cfg.Model.Tokenizer; format.IsGGUF(src) {
		tc, err := format.ReadTokenizerConfig(src)
		if err != nil {
			return err
		}
		return format.WriteGGUFWith(filepath.Join(out, BaseGGUFFile), m.LlamaConfig(), m.Tensors(), s.Tok, format.GGUFOptions{ChatTemplate: tc.ChatTemplate})
	}
	if err := m.Save(out); err != nil {
		return err
	}
	return s.Tok.Save(filepath.Join(out, TokenizerFile))
}

// writeBaseInfo completes a base policy directory: eval.json (info with
// the held-out evaluation ev, the phase losses of the pretraining curve
// and the model's size) and the model card README.md.
func writeBaseInfo(out string, recipe Config, m *model.Model, ev train.EvalResult, info BaseInfo, curves []byte) error {
	var err error
	if info.PhaseLoss, err = phaseLosses(bytes.NewReader(curves), 100); err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	info.Eval = ev
	info.Seed = recipe.Seed
	info.Vocab, info.Params = m.Cfg.Vocab, m.Cfg.NumParams()
	if info.Created == "" {
		info.Created = time.Now().UTC().Format(time.RFC3339)
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	if err := os.WriteFile(filepath.Join(out, BaseInfoFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("base %s: %w", out, err)
	}
	return os.WriteFile(filepath.Join(out, "README.md"), []byte(modelCard(recipe, m.Cfg, info)), 0o644)
}

// ReadBaseInfo reads a base policy directory's eval.json.
func ReadBaseInfo(dir string) (BaseInfo, error) {
	var info BaseInfo
	b, err := os.ReadFile(filepath.Join(dir, BaseInfoFile))
	if err != nil {
		return info, fmt.Errorf("base policy %s: %w", dir, err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("base policy %s/%s: %w", dir, BaseInfoFile, err)
	}
	return info, nil
}

// phaseLosses is the mean loss over the last n steps of each phase of a
// pretraining curve, and "sft-recall" for the recall sequences mixed into
// SFT batches.
func phaseLosses(r io.Reader, n int) (map[string]float64, error) {
	recs, err := train.ReadSFTCurve(r)
	if err != nil {
		return nil, fmt.Errorf("pretraining curve: %w", err)
	}
	byPhase := map[string][]float64{}
	for _, rec := range recs {
		byPhase[rec.Phase] = append(byPhase[rec.Phase], rec.Loss)
		if rec.MixedLoss != nil {
			byPhase[rec.Phase+"-recall"] = append(byPhase[rec.Phase+"-recall"], *rec.MixedLoss)
		}
	}
	out := map[string]float64{}
	for p, v := range byPhase {
		v = v[max(0, len(v)-n):]
		s := 0.0
		for _, x := range v {
			s += x
		}
		out[p] = s / float64(len(v))
	}
	return out, nil
}

// modelCard is a base policy's README.md.
func modelCard(recipe Config, m model.Config, info BaseInfo) string {
	var b strings.Builder
	ev := info.Eval
	n := ev.Episodes
	ci := func(p float64) string { return stats.RateCI(p, n) }
	fmt.Fprintf(&b, "# vault base policy (seed %d)\n\n", info.Seed)
	fmt.Fprintf(&b, "A pretrained base policy that CompactionRL runs start from (`model.init`, or `train --config` of a\n")
	fmt.Fprintf(&b, "run config that names it; docs/design.md §8): a Llama-architecture decoder (dim %d, %d layers, %d heads, %d KV heads, FFN %d,\n", m.Dim, m.Layers, m.Heads, m.KVHeads, m.FFN)
	phases := "copy and recall pretraining, then SFT"
	if recipe.SFT.CopySteps+recipe.SFT.RecallSteps == 0 {
		phases = "SFT"
	}
	fmt.Fprintf(&b, "vocabulary %d, %d parameters) warm-started on the built-in vault suite: %s on the\n", info.Vocab, info.Params, phases)
	fmt.Fprintf(&b, "scripted expert's demonstrations, whose summaries keep each fact with p = %g.\n", recipe.SFT.ExpertP)
	if info.InitFrom != "" {
		fmt.Fprintf(&b, "Initialised from %s. `model.gguf` (F32, with its tokenizer and chat template) is the policy; llama-server serves it;\n", info.InitFrom)
	} else {
		fmt.Fprintf(&b, "`model.safetensors` + `config.json` load as `LlamaForCausalLM`;\n")
	}
	fmt.Fprintf(&b, "`compactrl.yaml` is the exact recipe, with the suite and agent settings the policy was trained for;\n")
	fmt.Fprintf(&b, "`pretrain.jsonl` has one line per warm-start step.\n\n")
	fmt.Fprintf(&b, "## How it was made\n\n    %s\n\n", info.Command)
	fmt.Fprintf(&b, "- commit %s, kernel path %s, %d threads\n", info.Commit, info.KernelPath, info.Threads)
	fmt.Fprintf(&b, "- wall time %s (%s)\n", (time.Duration(info.WallS) * time.Second).String(), info.Created)
	fmt.Fprintf(&b, "- phases: %d copy, %d recall, %d SFT steps on %d demonstrations (%d recall sequences mixed into each SFT batch)\n",
		recipe.SFT.CopySteps, recipe.SFT.RecallSteps, recipe.SFT.Steps, recipe.SFT.Episodes, recipe.SFT.RecallMix)
	for _, p := range []string{"copy", "recall", "sft", "sft-recall"} {
		if v, ok := info.PhaseLoss[p]; ok {
			fmt.Fprintf(&b, "- %s loss, mean of the last 100 steps: %.3f\n", p, v)
		}
	}
	fmt.Fprintf(&b, "\n## Held-out metrics\n\n")
	fmt.Fprintf(&b, "Test seeds %d…%d of the suite (%d episodes per mode), sampled at temperature %g, window %d:\n\n",
		recipe.Suite.TestSeedStart, recipe.Suite.TestSeedStart+int64(n)-1, n, recipe.Agent.EvalTemperature, recipe.Agent.Context)
	fmt.Fprintf(&b, "| metric | value [95%% Wilson] |\n|---|---|\n")
	fmt.Fprintf(&b, "| pass@1 with compaction | %s |\n", ci(ev.Pass1Compact))
	fmt.Fprintf(&b, "| pass@1 single window | %s |\n", ci(ev.Pass1Single))
	fmt.Fprintf(&b, "| summary quality | %s |\n", train.FormatMetric(ev.SummaryQuality, "%.3f"))
	fmt.Fprintf(&b, "| compactions / episode | %.2f |\n", ev.Compactions)
	fmt.Fprintf(&b, "\nReproduce the evaluation: `compactrl eval checkpoint DIR --episodes %d`.\n", n)
	return b.String()
}
