package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/internal/jsref"
	"github.com/compactrl/compactrl/tokenizer"
)

func tokenizeCmd(t *testing.T, stdin string, args ...string) ([]int, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}, append([]string{"tokenize"}, args...))
	var ids []int
	if code == 0 {
		if err := json.Unmarshal(out.Bytes(), &ids); err != nil {
			t.Fatalf("stdout %q: %v", out.String(), err)
		}
	}
	return ids, errb.String(), code
}

// TestTokenizeCommand: stdin text and --chat messages with Qwen3's real
// tokenizer, against the JS reference (the chat via its own chat_template
// rendered by @huggingface/jinja).
func TestTokenizeCommand(t *testing.T) {
	dir := jsref.Dir(t, "qwen3")
	text := "Hello <|im_end|> wörld\n\n  日本語"
	msgs := []jsref.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "List files."},
		{Role: "assistant", Content: "ls -la"}, {Role: "tool", Content: "a.txt\nb.txt"}}
	ref := jsref.Run(t, jsref.Request{Dir: dir, Texts: []string{text}, Chats: []jsref.Chat{{Messages: msgs, AddGenerationPrompt: true}}})

	ids, stderr, code := tokenizeCmd(t, text, "--tokenizer", dir)
	if code != 0 || !slices.Equal(ids, ref.IDs[0]) {
		t.Errorf("stdin: code %d %s\n got %v\nwant %v", code, stderr, ids, ref.IDs[0])
	}
	plain, _, _ := tokenizeCmd(t, text, "--tokenizer", filepath.Join(dir, "tokenizer.json"), "--plain")
	if slices.Contains(plain, 151645) {
		t.Errorf("--plain made <|im_end|> a control token: %v", plain)
	}
	b, _ := json.Marshal(msgs)
	chat := filepath.Join(t.TempDir(), "chat.json")
	os.WriteFile(chat, b, 0o644)
	ids, stderr, code = tokenizeCmd(t, "", "--tokenizer", dir, "--chat", chat)
	if code != 0 || !slices.Equal(ids, ref.Chats[0].IDs) {
		t.Errorf("--chat: code %d %s\n got %v\nwant %v", code, stderr, ids, ref.Chats[0].IDs)
	}
}

// TestFormatFor: a tokenizer with compactrl's six special tokens keeps the
// built-in Template; a real one gets its chat format, or an error that
// says what to give.
func TestFormatFor(t *testing.T) {
	tok, err := tokenizer.Train([]string{"hello world the agent reads"}, 300, agent.SpecialTokenNames())
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := formatFor(tok, "unused", "")
	if err != nil || len(f.Action()) != 1 {
		t.Fatalf("built-in: %v %v", f, err)
	}
	if _, _, err := formatFor(tok, filepath.Join(t.TempDir(), "tokenizer.json"), "qwen3"); err == nil || !strings.Contains(err.Error(), "<|im_end|>") {
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
	if _, _, err := formatFor(plain, p, ""); err == nil || !strings.Contains(err.Error(), "--chat-template") {
		t.Errorf("no tokenizer_config.json: %v", err)
	}
	// A ChatML template without the generation prompt lays out the
	// probe differently from the chatml preset: refused, not substituted.
	noGen := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	os.WriteFile(filepath.Join(dir, tokenizer.ConfigFile), []byte(`{"chat_template": "`+strings.ReplaceAll(noGen, "\n", `\n`)+`", "eos_token": "<|im_end|>"}`), 0o644)
	if _, _, err := formatFor(plain, p, ""); err == nil || !strings.Contains(err.Error(), "renders a probe conversation differently") {
		t.Errorf("template without a generation prompt: %v", err)
	}
	withGen := noGen + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	os.WriteFile(filepath.Join(dir, tokenizer.ConfigFile), []byte(`{"chat_template": "`+strings.ReplaceAll(withGen, "\n", `\n`)+`", "eos_token": "<|im_end|>"}`), 0o644)
	f, desc, err := formatFor(plain, p, "")
	if err != nil {
		t.Fatal(err)
	}
	if cf, ok := f.(*agent.ChatFormat); !ok || cf.Preset().Name != "chatml" || !strings.Contains(desc, "equal to the model's own template") {
		t.Errorf("picked %#v (%s)", f, desc)
	}
}

// TestEngineChatTemplateFlags: --chat-template needs a local --tokenizer
// (the engine's /tokenize cannot encode the template's special tokens) and
// excludes --template.
func TestEngineChatTemplateFlags(t *testing.T) {
	base := engineSpec{urls: "http://127.0.0.1:9", kind: "llamacpp", tok: tokenFlags{chat: "qwen3"}, flags: engineFlags{timeout: time.Second, retries: 1}}
	for _, s := range []engineSpec{base, func() engineSpec { s := base; s.tok.path, s.tok.template = "x.json", "1,2,3,4,5,6"; return s }()} {
		if _, err := buildEngineAgent(context.Background(), agent.DefaultConfig(), s); err == nil || !strings.Contains(err.Error(), "--chat-template needs --tokenizer") {
			t.Errorf("%+v: err %v", s, err)
		}
	}
}
