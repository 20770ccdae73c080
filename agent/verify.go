package agent

import (
	"fmt"

	"github.com/ardanlabs/jinja"

	"github.com/compactrl/compactrl/tokenizer"
)

// probeConversation is the conversation VerifyTemplate renders: a system
// prompt, the task, an action, an observation (as the preset's
// observation role) and the generation prompt, the shape of every
// context the agent builds.
func probeConversation(obsRole string) []Message {
	return []Message{
		{Role: "system", Content: "You are an agent in a Linux shell. Reply with one command."},
		{Role: "user", Content: "Task: print the first line of notes.txt in /app."},
		{Role: "assistant", Content: "head -n 1 /app/notes.txt"},
		{Role: obsRole, Content: "vault code: 4127\nexit status 0"},
	}
}

// VerifyTemplate renders a probe conversation with the model's own chat
// template (source: the Jinja text of tokenizer.chat_template or
// tokenizer_config.json's chat_template, rendered by
// github.com/ardanlabs/jinja, a Jinja engine written for models' chat
// templates, with bos and eos as bos_token and eos_token) and with f's
// preset, and returns an error naming the first difference: a preset
// chosen for a model must lay out its turns exactly as the model's own
// template does, or it is refused rather than silently substituted.
func (f *ChatFormat) VerifyTemplate(source, bos, eos string) error {
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return fmt.Errorf("chat template: the model's own template does not compile: %w", err)
	}
	msgs := probeConversation(f.preset.ObservationRole)
	data := make([]any, len(msgs))
	for i, m := range msgs {
		data[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	want, err := tmpl.Render(map[string]any{
		"messages": data, "add_generation_prompt": true, "bos_token": bos, "eos_token": eos,
	})
	if err != nil {
		return fmt.Errorf("chat template: rendering a probe conversation with the model's own template: %w", err)
	}
	ids, err := f.Render(msgs, true)
	if err != nil {
		return fmt.Errorf("chat template %s: %w", f.preset.Name, err)
	}
	got := f.tok.Decode(ids)
	if got == want {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Errorf("chat template: preset %s renders a probe conversation differently from the model's own template, from byte %d: preset …%q…, model's template …%q… (give --chat-template with a preset .json file that matches it)",
		f.preset.Name, i, got[lo:min(len(got), i+40)], want[lo:min(len(want), i+40)])
}

// ModelFormat is the chat format of a real model whose tokenizer
// configuration (chat template, BOS, EOS) cfg was read from from: the
// preset its own template names (DetectPreset), verified against that
// template (VerifyTemplate; a model without a template is known by its
// special tokens). It also says which template lays the prompts out.
func ModelFormat(tok ChatTokenizer, cfg tokenizer.Config, from string) (*ChatFormat, string, error) {
	hasSpecial := func(s string) bool { _, ok := tok.SpecialID(s); return ok }
	p, err := DetectPreset(cfg.ChatTemplate, cfg.EOS, hasSpecial)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", from, err)
	}
	f, err := NewChatFormat(p, tok)
	if err != nil {
		return nil, "", err
	}
	if cfg.ChatTemplate == "" {
		return f, fmt.Sprintf("preset %s (the model ships no chat template: chosen by its special tokens)", p.Name), nil
	}
	if err := f.VerifyTemplate(cfg.ChatTemplate, cfg.BOS, cfg.EOS); err != nil {
		return nil, "", fmt.Errorf("the chat template of %s: %w", from, err)
	}
	return f, fmt.Sprintf("preset %s, equal to the model's own template (%s) on a probe conversation", p.Name, from), nil
}
