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
	tokPath := fs.String("tokenizer", "", "tokenizer.json, or a directory holding it (and tokenizer_config.json) (required)")
	chatPath := fs.String("chat", "", "JSON file of messages [{\"role\", \"content\"}] to render with the chat template")
	chatTmpl := fs.String("chat-template", "", chatTemplateUsage)
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
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	var ids []int
	if *chatPath == "" {
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if *plain {
			ids = tok.Encode(string(b))
		} else {
			ids = tok.EncodeWithSpecials(string(b))
		}
	} else {
		b, err := os.ReadFile(*chatPath)
		if err != nil {
			return fmt.Errorf("--chat: %w", err)
		}
		var msgs []agent.Message
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&msgs); err != nil {
			return fmt.Errorf("--chat %s: want a JSON list of {\"role\", \"content\"}: %w", *chatPath, err)
		}
		f, err := chatFormat(tok, *tokPath, *chatTmpl)
		if err != nil {
			return err
		}
		if ids, err = f.Render(msgs, !*noGen); err != nil {
			return fmt.Errorf("--chat %s: %w", *chatPath, err)
		}
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
