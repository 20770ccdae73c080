package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/tokenizer"
)

// ChatTemplateUsage describes the values ChooseChatFormat's spec takes
// (the help of the command line's --chat-template).
func ChatTemplateUsage() string {
	return "real model's chat template: a preset (" + strings.Join(PresetNames(), ", ") + "), a preset .json file, or a Jinja file (default: the preset the model's own template names: a GGUF --tokenizer's tokenizer.chat_template, else tokenizer_config.json beside --tokenizer; refused when it renders differently)"
}

// ChooseChatFormat builds a real model's chat format for tok, read from
// tokPath: the preset spec names (a preset name, a preset .json file, or
// a Jinja file whose preset it must equal) when given, else the preset the
// model's own chat template (a GGUF's tokenizer.chat_template, else
// tokenizer_config.json beside tokPath) names. Whenever the model's own
// Jinja template is known the preset must render a probe conversation
// exactly as it does (ChatFormat.VerifyTemplate), or the model is refused.
// It also returns which template renders the prompts.
func ChooseChatFormat(tok *tokenizer.Tokenizer, tokPath, spec string) (*ChatFormat, string, error) {
	if spec == "" {
		cp := format.TokenizerConfigPath(tokPath)
		cfg, err := format.ReadTokenizerConfig(cp)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, "", fmt.Errorf("--tokenizer %s: no %s beside it to pick a chat template from; give --chat-template NAME|FILE", tokPath, tokenizer.ConfigFile)
			}
			return nil, "", fmt.Errorf("--tokenizer %s: %w", tokPath, err)
		}
		f, desc, err := ModelFormat(tok, cfg, cp)
		if err != nil {
			return nil, "", fmt.Errorf("--tokenizer %s: %w", tokPath, err)
		}
		return f, desc, nil
	}
	p, err := LoadPreset(spec)
	if err != nil {
		return nil, "", fmt.Errorf("--chat-template: %w", err)
	}
	var source string
	if _, preset := Presets()[spec]; !preset && !strings.EqualFold(filepath.Ext(spec), ".json") {
		b, err := os.ReadFile(spec)
		if err != nil {
			return nil, "", fmt.Errorf("--chat-template: %w", err)
		}
		source = string(b)
	}
	f, err := NewChatFormat(p, tok)
	if err != nil {
		return nil, "", fmt.Errorf("--tokenizer %s: %w", tokPath, err)
	}
	if source == "" {
		return f, fmt.Sprintf("preset %s (--chat-template %s)", p.Name, spec), nil
	}
	if err := f.VerifyTemplate(source, "", ""); err != nil {
		return nil, "", fmt.Errorf("--tokenizer %s with the chat template of %s: %w", tokPath, spec, err)
	}
	return f, fmt.Sprintf("preset %s, equal to the model's own template (%s) on a probe conversation", p.Name, spec), nil
}

// ChooseFormat is the layout of the agent's turns for a tokenizer read from
// tokPath: the six-id Template when the tokenizer has compactrl's own
// special tokens and no chat template spec is given, else the model's chat
// format (ChooseChatFormat). It also says which template that is.
func ChooseFormat(tok *tokenizer.Tokenizer, tokPath, spec string) (Format, string, error) {
	if spec == "" {
		if tmpl, err := TemplateFrom(tok.SpecialID); err == nil {
			return tmpl.Format(), "compactrl's six-token template (the tokenizer's own special tokens)", nil
		}
	}
	f, desc, err := ChooseChatFormat(tok, tokPath, spec)
	if err != nil {
		return nil, "", fmt.Errorf("%w (or give --template ids for compactrl's six-token layout)", err)
	}
	return f, desc, nil
}

// ParseTemplate reads compactrl's six-token template from
// "system,user,assistant,observation,summary,end" token ids, each distinct.
func ParseTemplate(spec string) (Template, error) {
	parts := strings.Split(spec, ",")
	if len(parts) != 6 {
		return Template{}, fmt.Errorf("--template %q: want 6 ids system,user,assistant,observation,summary,end", spec)
	}
	ids := make([]int, 6)
	seen := map[int]bool{}
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			return Template{}, fmt.Errorf("--template %q: %q is not a token id", spec, p)
		}
		if seen[v] {
			return Template{}, fmt.Errorf("--template %q: id %d used twice", spec, v)
		}
		seen[v], ids[i] = true, v
	}
	return Template{System: ids[0], User: ids[1], Assistant: ids[2], Observation: ids[3], Summary: ids[4], EndOfTurn: ids[5]}, nil
}
