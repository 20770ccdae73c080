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

	"github.com/compactrl/compactrl/internal/jsref"
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
