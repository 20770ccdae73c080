package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/tokenizer"
)

// runTokenize is `compactrl tokenize`: what a model sees, as token ids.
// Text on stdin is encoded as Hugging Face tokenizers do by default
// (special-token strings become their ids; --plain keeps them text, as the
// agent encodes tasks and observations), no BOS added. With --chat
// FILE.json, a list of {role, content} messages (system, user, assistant,
// tool) is rendered with the model's chat template, as the agent lays it
// out, followed by the generation prompt.
func runTokenize(_ context.Context, e env, args []string) error {
	fs := newCmdLine("tokenize", "tokenize --tokenizer FILE|DIR [--plain] < text",
		"tokenize --tokenizer FILE|DIR --chat MESSAGES.json [--chat-template NAME|FILE]")
	fs.examples = []string{"echo 'hello world' | compactrl tokenize --tokenizer models/vault-base",
		"compactrl tokenize --tokenizer ~/qwen3 --chat messages.json"}
	tokPath := fs.String("tokenizer", "", "tokenizer.json, or a directory holding it (and tokenizer_config.json), or a GGUF model file (required)")
	chatPath := fs.String("chat", "", "JSON file of messages [{\"role\", \"content\"}] to render with the chat template")
	chatTmpl := fs.String("chat-template", "", agent.ChatTemplateUsage())
	plain := fs.Bool("plain", false, "encode special-token strings in stdin as text")
	noGen := fs.Bool("no-generation-prompt", false, "with --chat: leave out the assistant opener at the end")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	switch {
	case *tokPath == "":
		return errors.New("--tokenizer FILE|DIR is required")
	case *chatPath == "" && (*chatTmpl != "" || *noGen):
		return errors.New("--chat-template and --no-generation-prompt go with --chat")
	case *chatPath != "" && *plain:
		return errors.New("--plain is for text on stdin, not --chat")
	}
	tok, err := format.ReadTokenizer(*tokPath)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	var ids []int
	if *chatPath == "" {
		ids, err = encodeStdin(e, tok, *plain)
	} else {
		ids, err = renderChat(tok, *tokPath, *chatPath, *chatTmpl, !*noGen)
	}
	if err != nil {
		return err
	}
	if ids == nil {
		ids = []int{}
	}
	out, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", out)
	return err
}

// encodeStdin encodes stdin as Hugging Face tokenizers do by default
// (special-token strings become their ids), or all as text when plain.
func encodeStdin(e env, tok *tokenizer.Tokenizer, plain bool) ([]int, error) {
	b, err := io.ReadAll(e.stdin)
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if plain {
		return tok.Encode(string(b)), nil
	}
	return tok.EncodeWithSpecials(string(b)), nil
}

// renderChat renders the messages of the JSON file path with the chat
// template (chatFormat), followed by the generation prompt when gen.
func renderChat(tok *tokenizer.Tokenizer, tokPath, path, tmpl string, gen bool) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--chat: %w", err)
	}
	var msgs []agent.Message
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msgs); err != nil {
		return nil, fmt.Errorf("--chat %s: want a JSON list of {\"role\", \"content\"}: %w", path, err)
	}
	f, _, err := agent.ChooseChatFormat(tok, tokPath, tmpl)
	if err != nil {
		return nil, err
	}
	ids, err := f.Render(msgs, gen)
	if err != nil {
		return nil, fmt.Errorf("--chat %s: %w", path, err)
	}
	return ids, nil
}
