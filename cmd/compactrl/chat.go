package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/tokenizer"
)

// chatTemplateUsage is the help of --chat-template (eval, tokenize).
const chatTemplateUsage = "real model's chat template: a preset (qwen3, chatml, llama3, llama3.1, deepseek-v3, gemma3, gpt-oss, glm4), a preset .json file, or a Jinja file (default: the preset the model's own template names: a GGUF --tokenizer's tokenizer.chat_template, else tokenizer_config.json beside --tokenizer; refused when it renders differently)"

// chatFormat builds a real model's chat format for tok: the --chat-template
// preset when given, else the preset the model's own chat template (a GGUF
// --tokenizer's tokenizer.chat_template, else tokenizer_config.json beside
// --tokenizer) names. Whenever the model's own Jinja template is known (that
// file, or --chat-template FILE.jinja) the preset must render a probe
// conversation exactly as it does (agent.ChatFormat.VerifyTemplate), or the
// model is refused. It also returns which template renders the prompts.
func chatFormat(tok *tokenizer.Tokenizer, tokPath, spec string) (*agent.ChatFormat, string, error) {
	var p agent.ChatPreset
	var source, from string
	var err error
	if spec != "" {
		if p, err = agent.LoadPreset(spec); err != nil {
			return nil, "", fmt.Errorf("--chat-template: %w", err)
		}
		if _, preset := agent.Presets()[spec]; !preset && !strings.EqualFold(filepath.Ext(spec), ".json") {
			b, err := os.ReadFile(spec)
			if err != nil {
				return nil, "", fmt.Errorf("--chat-template: %w", err)
			}
			source, from = string(b), spec
		}
	} else {
		cp := format.TokenizerConfigPath(tokPath)
		cfg, err := format.ReadTokenizerConfig(cp)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, "", fmt.Errorf("--tokenizer %s: no %s beside it to pick a chat template from; give --chat-template NAME|FILE", tokPath, tokenizer.ConfigFile)
			}
			return nil, "", fmt.Errorf("--tokenizer %s: %w", tokPath, err)
		}
		f, desc, err := agent.ModelFormat(tok, cfg, cp)
		if err != nil {
			return nil, "", fmt.Errorf("--tokenizer %s: %w", tokPath, err)
		}
		return f, desc, nil
	}
	f, err := agent.NewChatFormat(p, tok)
	if err != nil {
		return nil, "", fmt.Errorf("--tokenizer %s: %w", tokPath, err)
	}
	if source == "" {
		return f, fmt.Sprintf("preset %s (--chat-template %s)", p.Name, spec), nil
	}
	if err := f.VerifyTemplate(source, "", ""); err != nil {
		return nil, "", fmt.Errorf("--tokenizer %s with the chat template of %s: %w", tokPath, from, err)
	}
	return f, fmt.Sprintf("preset %s, equal to the model's own template (%s) on a probe conversation", p.Name, from), nil
}

// formatFor is the layout of the agent's turns for a --tokenizer: the
// built-in six-id Template when the tokenizer has compactrl's own special
// tokens and no --chat-template is given, else the model's chat format.
// It also says which template that is.
func formatFor(tok *tokenizer.Tokenizer, tokPath, spec string) (agent.Format, string, error) {
	if spec == "" {
		if tmpl, err := agent.TemplateFrom(tok.SpecialID); err == nil {
			return tmpl.Format(), "compactrl's six-token template (the tokenizer's own special tokens)", nil
		}
	}
	f, desc, err := chatFormat(tok, tokPath, spec)
	if err != nil {
		return nil, "", fmt.Errorf("%w (or give --template ids for compactrl's six-token layout)", err)
	}
	return f, desc, nil
}
