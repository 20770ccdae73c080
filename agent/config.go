package agent

import (
	"errors"

	"github.com/compactrl/compactrl/internal/field"
)

// Config is the agent loop's budget and limits, all lengths in tokens of the
// policy's tokenizer. Its YAML keys are those of the training config's agent
// section; decoding over DefaultConfig() keeps the default of every absent
// key. The three texts are used as written: an empty one is an empty turn
// content, not a default (callers that want the environment's system prompt
// set it, as DefaultConfig leaves it empty).
type Config struct {
	Context int `yaml:"context"` // C: the context window; its one name is context (this field, Budget's, YAML, flag --context, serve's JSON, errors)
	Reserve int `yaml:"reserve"` // T_comp: compact before a policy call when C − |h| < T_comp

	KeepLast        int `yaml:"keep_last"`         // k: steps re-included after a compaction (reduced until they fit)
	MaxCompactions  int `yaml:"max_compactions"`   // compactions allowed per episode; then the loop runs until the window is full
	MaxTurns        int `yaml:"max_turns"`         // policy action calls per episode
	MaxFormatErrors int `yaml:"max_format_errors"` // this many invalid actions in a row end the episode as format_error

	MaxActionTokens  int `yaml:"max_action_tokens"`  // A: tokens one action may sample (its stop token included)
	MaxSummaryTokens int `yaml:"max_summary_tokens"` // S: tokens one summary may sample (its stop token included)
	// MaxObservationTokens caps one observation's content (head + tail with
	// a marker). 0 derives the largest cap the reserve allows (see Budget).
	// Its one name is max_observation_tokens (YAML, serve's JSON, errors;
	// the flag --max-observation-tokens); train's config still reads the
	// former YAML key observation_cap, with a deprecation notice.
	MaxObservationTokens int `yaml:"max_observation_tokens"`

	// NoCompaction is the baseline: never compact; the episode ends
	// overlong when the window is full.
	NoCompaction bool `yaml:"no_compaction"`

	Temperature float64 `yaml:"temperature"`
	TopP        float64 `yaml:"top_p"`

	SystemPrompt       string `yaml:"system_prompt"`       // s
	SummaryInstruction string `yaml:"summary_instruction"` // the text of q_sum
	ResumeText         string `yaml:"resume_text"`         // the text that introduces the summary in resume(S)
}

// DefaultConfig follows the paper (k = 2, 3 compactions, 250 turns) with a
// small window suited to the built-in suite and model.
func DefaultConfig() Config {
	return Config{
		Context:            768,
		Reserve:            320,
		KeepLast:           2,
		MaxCompactions:     3,
		MaxTurns:           250,
		MaxFormatErrors:    3,
		MaxActionTokens:    32,
		MaxSummaryTokens:   96,
		Temperature:        1,
		TopP:               1,
		SummaryInstruction: DefaultSummaryInstruction(),
		ResumeText:         DefaultResumeText(),
	}
}

// Upper bounds of the agent settings, far past any real budget and small
// enough that no count overflows or sizes an absurd allocation. Configs
// and request bodies are checked against them where they are read.
const (
	// MaxContextTokens bounds the window and every token budget in it.
	MaxContextTokens = 1 << 24
	// MaxCount bounds keep_last, max_compactions, max_turns and
	// max_format_errors.
	MaxCount = 1 << 20
	// MaxTemperature bounds the sampling temperature.
	MaxTemperature = 100
)

// Validate is the one check of the settings' ranges (the budget's
// inequalities are Budget's). It returns every unusable setting as a
// *field.Error named by its key (the YAML key, which serve's JSON,
// agent.KEY, and the flags, --key-with-dashes, share), joined in field
// order; errors.As finds the first.
func (c Config) Validate() error {
	errs := []error{field.CheckInts(
		field.Int{Path: "context", V: c.Context, Min: 1, Max: MaxContextTokens}, field.Int{Path: "reserve", V: c.Reserve, Min: 1, Max: MaxContextTokens},
		field.Int{Path: "keep_last", V: c.KeepLast, Max: MaxCount}, field.Int{Path: "max_compactions", V: c.MaxCompactions, Max: MaxCount},
		field.Int{Path: "max_turns", V: c.MaxTurns, Min: 1, Max: MaxCount}, field.Int{Path: "max_format_errors", V: c.MaxFormatErrors, Min: 1, Max: MaxCount},
		field.Int{Path: "max_action_tokens", V: c.MaxActionTokens, Min: 1, Max: MaxContextTokens}, field.Int{Path: "max_summary_tokens", V: c.MaxSummaryTokens, Min: 1, Max: MaxContextTokens},
		field.Int{Path: "max_observation_tokens", V: c.MaxObservationTokens, Max: MaxContextTokens},
	)}
	bad := func(path, format string, a ...any) { errs = append(errs, field.Errorf(path, format, a...)) }
	if c.Context > 0 && c.Reserve >= c.Context {
		bad("reserve", "%d must be below context %d", c.Reserve, c.Context)
	}
	if !(c.Temperature >= 0 && c.Temperature <= MaxTemperature) {
		bad("temperature", "%v must be in [0, %d]", c.Temperature, MaxTemperature)
	}
	if !(c.TopP >= 0 && c.TopP <= 1) {
		bad("top_p", "%v must be in [0, 1]", c.TopP)
	}
	return errors.Join(errs...)
}
