package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/tokenizer"
)

// TestChooseFormat: a tokenizer with compactrl's six special tokens keeps the
// built-in Template; a real one gets its chat format, or an error that
// says what to give.
func TestChooseFormat(t *testing.T) {
	tok, err := tokenizer.Train([]string{"hello world the agent reads"}, 300, SpecialTokenNames())
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := ChooseFormat(tok, "unused", "")
	if err != nil || len(f.Action()) != 1 {
		t.Fatalf("built-in: %v %v", f, err)
	}
	if _, _, err := ChooseFormat(tok, filepath.Join(t.TempDir(), "tokenizer.json"), "qwen3"); err == nil || !strings.Contains(err.Error(), "<|im_end|>") {
		t.Errorf("qwen3 preset on a tokenizer without its specials: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	if err := tok.Save(p); err != nil {
		t.Fatal(err)
	}
	plain, err := tokenizer.Train([]string{"hello world"}, 280, []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ChooseFormat(plain, p, ""); err == nil || !strings.Contains(err.Error(), "--chat-template") {
		t.Errorf("no tokenizer_config.json: %v", err)
	}
	// A ChatML template without the generation prompt lays out the
	// probe differently from the chatml preset: refused, not substituted.
	noGen := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	os.WriteFile(filepath.Join(dir, tokenizer.ConfigFile), []byte(`{"chat_template": "`+strings.ReplaceAll(noGen, "\n", `\n`)+`", "eos_token": "<|im_end|>"}`), 0o644)
	if _, _, err := ChooseFormat(plain, p, ""); err == nil || !strings.Contains(err.Error(), "renders a probe conversation differently") {
		t.Errorf("template without a generation prompt: %v", err)
	}
	withGen := noGen + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	os.WriteFile(filepath.Join(dir, tokenizer.ConfigFile), []byte(`{"chat_template": "`+strings.ReplaceAll(withGen, "\n", `\n`)+`", "eos_token": "<|im_end|>"}`), 0o644)
	f, desc, err := ChooseFormat(plain, p, "")
	if err != nil {
		t.Fatal(err)
	}
	if cf, ok := f.(*ChatFormat); !ok || cf.Preset().Name != "chatml" || !strings.Contains(desc, "equal to the model's own template") {
		t.Errorf("picked %#v (%s)", f, desc)
	}
}

func TestParseTemplate(t *testing.T) {
	tm, err := ParseTemplate("1, 2,3,4,5,6")
	if err != nil || tm != (Template{System: 1, User: 2, Assistant: 3, Observation: 4, Summary: 5, EndOfTurn: 6}) {
		t.Fatalf("%+v %v", tm, err)
	}
	for spec, want := range map[string]string{"1,2,3": "want 6 ids", "1,2,3,4,5,x": "not a token id", "1,2,3,4,5,1": "used twice", "1,2,3,4,5,-1": "not a token id"} {
		if _, err := ParseTemplate(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", spec, err, want)
		}
	}
}
