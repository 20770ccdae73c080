package agent

import (
	"errors"
	"fmt"
)

// Config is the agent loop's budget and limits, all lengths in tokens of the
// policy's tokenizer. Its YAML keys are those of the training config's agent
// section; decoding over DefaultConfig() keeps the default of every absent
// key. The three texts are used as written: an empty one is an empty turn
// content, not a default (callers that want the environment's system prompt
// set it, as DefaultConfig leaves it empty).
type Config struct {
	Window  int `yaml:"context"` // C: the context window
	Reserve int `yaml:"reserve"` // T_comp: compact before a policy call when C − |h| < T_comp

	KeepLast        int `yaml:"keep_last"`         // k: steps re-included after a compaction (reduced until they fit)
	MaxCompactions  int `yaml:"max_compactions"`   // compactions allowed per episode; then the loop runs until the window is full
	MaxTurns        int `yaml:"max_turns"`         // policy action calls per episode
	MaxFormatErrors int `yaml:"max_format_errors"` // this many invalid actions in a row end the episode as format_error

	MaxActionTokens  int `yaml:"max_action_tokens"`  // A: tokens one action may sample (its stop token included)
	MaxSummaryTokens int `yaml:"max_summary_tokens"` // S: tokens one summary may sample (its stop token included)
	// MaxObservationTokens caps one observation's content (head + tail with
	// a marker). 0 derives the largest cap the reserve allows (see Budget).
	MaxObservationTokens int `yaml:"observation_cap"`

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
		Window:             768,
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

func (c Config) validate() error {
	var errs []error
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"window", c.Window, MaxContextTokens}, {"reserve", c.Reserve, MaxContextTokens},
		{"max_action_tokens", c.MaxActionTokens, MaxContextTokens}, {"max_summary_tokens", c.MaxSummaryTokens, MaxContextTokens},
		{"max_observation_tokens", c.MaxObservationTokens, MaxContextTokens},
		{"keep_last", c.KeepLast, MaxCount}, {"max_compactions", c.MaxCompactions, MaxCount},
		{"max_turns", c.MaxTurns, MaxCount}, {"max_format_errors", c.MaxFormatErrors, MaxCount},
	} {
		if f.v > f.max {
			errs = append(errs, fmt.Errorf("%s %d is above the limit %d", f.name, f.v, f.max))
		}
	}
	if !(c.Temperature >= 0 && c.Temperature <= MaxTemperature) {
		errs = append(errs, fmt.Errorf("temperature %v must be in [0, %d]", c.Temperature, MaxTemperature))
	}
	if !(c.TopP >= 0 && c.TopP <= 1) {
		errs = append(errs, fmt.Errorf("top_p %v must be in [0, 1]", c.TopP))
	}
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("window %d must be positive", c.Window))
	}
	if c.Reserve <= 0 || c.Reserve >= c.Window {
		errs = append(errs, fmt.Errorf("reserve %d must be in (0, window %d)", c.Reserve, c.Window))
	}
	if c.KeepLast < 0 {
		errs = append(errs, fmt.Errorf("keep_last %d must be ≥ 0", c.KeepLast))
	}
	if c.MaxCompactions < 0 {
		errs = append(errs, fmt.Errorf("max_compactions %d must be ≥ 0", c.MaxCompactions))
	}
	if c.MaxTurns <= 0 {
		errs = append(errs, fmt.Errorf("max_turns %d must be positive", c.MaxTurns))
	}
	if c.MaxFormatErrors <= 0 {
		errs = append(errs, fmt.Errorf("max_format_errors %d must be positive", c.MaxFormatErrors))
	}
	if c.MaxActionTokens <= 0 {
		errs = append(errs, fmt.Errorf("max_action_tokens %d must be positive", c.MaxActionTokens))
	}
	if c.MaxSummaryTokens <= 0 {
		errs = append(errs, fmt.Errorf("max_summary_tokens %d must be positive", c.MaxSummaryTokens))
	}
	if c.MaxObservationTokens < 0 {
		errs = append(errs, fmt.Errorf("max_observation_tokens %d must be ≥ 0", c.MaxObservationTokens))
	}
	return errors.Join(errs...)
}
