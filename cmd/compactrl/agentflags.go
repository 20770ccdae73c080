package main

import (
	"flag"
	"fmt"
	"github.com/compactrl/compactrl/remoteagent"
	"os"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
)

// bindAgentFlags binds the agent loop's settings (eval, serve, rollout) to
// flags of fs, straight into cfg; cfg's values are the defaults.
func bindAgentFlags(fs *flag.FlagSet, cfg *agent.Config) {
	fs.IntVar(&cfg.Context, "context", cfg.Context, "context window C in tokens")
	fs.IntVar(&cfg.Reserve, "reserve", cfg.Reserve, "compaction reserve T_comp: compact when C − |h| < T_comp")
	fs.IntVar(&cfg.KeepLast, "keep-last", cfg.KeepLast, "steps k re-included after a compaction")
	fs.IntVar(&cfg.MaxCompactions, "max-compactions", cfg.MaxCompactions, "compactions per episode")
	fs.IntVar(&cfg.MaxTurns, "max-turns", cfg.MaxTurns, "policy actions per episode")
	fs.IntVar(&cfg.MaxActionTokens, "max-action-tokens", cfg.MaxActionTokens, "tokens per action")
	fs.IntVar(&cfg.MaxSummaryTokens, "max-summary-tokens", cfg.MaxSummaryTokens, "tokens per summary")
	fs.IntVar(&cfg.MaxObservationTokens, "max-observation-tokens", cfg.MaxObservationTokens, "observation cap in tokens (0: the most the reserve allows)")
	fs.IntVar(&cfg.MaxFormatErrors, "max-format-errors", cfg.MaxFormatErrors, "invalid actions in a row that end an episode")
	fs.BoolVar(&cfg.NoCompaction, "no-compaction", cfg.NoCompaction, "never compact: the episode ends overlong when the window is full (the single-window baseline)")
	fs.Float64Var(&cfg.Temperature, "temperature", cfg.Temperature, "sampling temperature")
	fs.Float64Var(&cfg.TopP, "top-p", cfg.TopP, "nucleus top-p")
}

// engineAgentConfig is the agent configuration eval and serve start from
// for real models on real tasks: a 32k window with an 8k reserve, long
// actions and summaries, eval's system prompt.
func engineAgentConfig(temperature float64) agent.Config {
	c := agent.DefaultConfig()
	c.Context, c.Reserve = 32768, 8192
	c.MaxActionTokens, c.MaxSummaryTokens = 1024, 2048
	c.Temperature = temperature
	c.SystemPrompt = shelltask.SystemPrompt()
	return c
}

// promptFlags are the prompts' texts (eval, serve): --system-prompt names
// a file; the summary instruction and resume text are bound into the
// config.
type promptFlags struct{ systemPath string }

func bindPromptFlags(fs *flag.FlagSet, cfg *agent.Config, systemHelp string) *promptFlags {
	p := &promptFlags{}
	fs.StringVar(&p.systemPath, "system-prompt", "", systemHelp)
	fs.StringVar(&cfg.SummaryInstruction, "summary-instruction", cfg.SummaryInstruction, "the summary instruction q_sum")
	fs.StringVar(&cfg.ResumeText, "resume-text", cfg.ResumeText, "the text that introduces the summary after a compaction")
	return p
}

// apply reads --system-prompt into cfg (nothing when it is not given).
func (p *promptFlags) apply(cfg *agent.Config) error {
	if p.systemPath == "" {
		return nil
	}
	b, err := os.ReadFile(p.systemPath)
	if err != nil {
		return fmt.Errorf("--system-prompt: %w", err)
	}
	cfg.SystemPrompt = strings.TrimSpace(string(b))
	return nil
}

// tokenFlags say how the agent encodes text for an HTTP engine (eval,
// serve): a local tokenizer.json, the six template ids, a chat template.
type tokenFlags struct {
	path, template, chat string
}

func (f *tokenFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "tokenizer", "", "tokenizer.json of the policy (default: the first engine's /tokenize; required for sglang)")
	fs.StringVar(&f.template, "template", "", "template token ids system,user,assistant,observation,summary,end (default: looked up by name in --tokenizer)")
	fs.StringVar(&f.chat, "chat-template", "", agent.ChatTemplateUsage())
}

// check refuses a chat template the engines could not be given
// (remoteagent.Spec.CheckEncoding).
func (f tokenFlags) check() error {
	return remoteagent.Spec{Tokenizer: f.path, Template: f.template, ChatTemplate: f.chat}.CheckEncoding()
}
