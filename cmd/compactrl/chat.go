package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/tokenizer"
)

// chatTemplateUsage is the help of --chat-template (eval, tokenize).
const chatTemplateUsage = "real model's chat template: a preset (qwen3, chatml, llama3, llama3.1, deepseek-v3, gemma3, gpt-oss, glm4), a preset .json file, or a Jinja file (default: picked from tokenizer_config.json beside --tokenizer)"

// configPath is the tokenizer_config.json beside a --tokenizer FILE|DIR.
func configPath(tokPath string) string {
	if fi, err := os.Stat(tokPath); err == nil && fi.IsDir() {
		return filepath.Join(tokPath, tokenizer.ConfigFile)
	}
	return filepath.Join(filepath.Dir(tokPath), tokenizer.ConfigFile)
}

// chatFormat builds a real model's chat format for tok: the --chat-template
// preset when given, else the one tokenizer_config.json's chat_template
// (next to --tokenizer) names.
func chatFormat(tok *tokenizer.Tokenizer, tokPath, spec string) (*agent.ChatFormat, error) {
	var p agent.ChatPreset
	var err error
	if spec != "" {
		if p, err = agent.LoadPreset(spec); err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
	} else {
		cp := configPath(tokPath)
		cfg, err := tokenizer.LoadConfig(cp)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("--tokenizer %s: no %s beside it to pick a chat template from; give --chat-template NAME|FILE", tokPath, tokenizer.ConfigFile)
			}
			return nil, fmt.Errorf("--tokenizer %s: %w", tokPath, err)
		}
		hasSpecial := func(s string) bool { _, ok := tok.SpecialID(s); return ok }
		if p, err = agent.DetectPreset(cfg.ChatTemplate, cfg.EOS, hasSpecial); err != nil {
			return nil, fmt.Errorf("--tokenizer %s: %w", cp, err)
		}
	}
	f, err := agent.NewChatFormat(p, tok)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", tokPath, err)
	}
	return f, nil
}

// formatFor is the layout of the agent's turns for a --tokenizer: the
// built-in six-id Template when the tokenizer has compactrl's own special
// tokens and no --chat-template is given, else the model's chat format.
func formatFor(tok *tokenizer.Tokenizer, tokPath, spec string) (agent.Format, error) {
	if spec == "" {
		if tmpl, err := agent.TemplateFrom(tok.SpecialID); err == nil {
			return tmpl.Format(), nil
		}
	}
	f, err := chatFormat(tok, tokPath, spec)
	if err != nil {
		return nil, fmt.Errorf("%w (or give --template ids for compactrl's six-token layout)", err)
	}
	return f, nil
}
