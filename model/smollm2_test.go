package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/testenv"
)

// smolPrompt is a ChatML conversation of SmolLM2-135M-Instruct's own
// vocabulary (ids of "<|im_start|>system\nYou are a shell agent…").
func smolPrompt(t *testing.T, path string) []int {
	t.Helper()
	tok, err := format.ReadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok.EncodeWithSpecials("<|im_start|>system\nYou are a shell agent. Reply with one command.<|im_end|>\n" +
		"<|im_start|>user\nList the files in /app, then print the first line of notes.txt.<|im_end|>\n<|im_start|>assistant\nls /app\n")
}

// TestSmolLM2LogitsMatchTransformers loads SmolLM2-135M-Instruct's Q4_1
// GGUF into the built-in model and compares its logits at every position
// with transformers' float32 LlamaForCausalLM loaded from the same file
// (gguf_file=), which dequantizes with the gguf package and un-permutes
// q/k itself.
//
// Skipped in -short mode: CI's arm64 run of this package under qemu is
// short and runs before the reference venv is installed.
func TestSmolLM2LogitsMatchTransformers(t *testing.T) {
	if testing.Short() {
		t.Skip("real-model parity: full run only")
	}
	path := testenv.MustHaveSmolLM2(t)
	py := testenv.MustHaveReference(t, "torch", "transformers", "gguf")
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Cfg
	if c.Layers != 30 || c.Dim != 576 || c.Heads != 9 || c.KVHeads != 3 || c.FFN != 1536 || c.Vocab != 49152 || !c.TiedEmbeddings || c.RopeTheta != 100000 || c.MaxSeq != 8192 {
		t.Fatalf("config from the metadata: %+v", c)
	}
	ids := smolPrompt(t, path)
	out := filepath.Join(t.TempDir(), "logits.f32")
	body, _ := json.Marshal(ids)
	cmd := exec.Command(py, "testdata/hf_gguf_logits.py", path, out)
	cmd.Stdin = bytes.NewReader(body)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	info, err := cmd.Output()
	if err != nil {
		t.Fatalf("transformers: %v\n%s", err, stderr.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	V := c.Vocab
	if len(raw) != 4*V*len(ids) {
		t.Fatalf("transformers wrote %d bytes for %d positions × %d (%s)", len(raw), len(ids), V, info)
	}
	got, err := m.NewScorer().Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	var maxAbs, maxRef float64
	agree := 0
	for p := range ids {
		best, bestRef := 0, 0
		for v := 0; v < V; v++ {
			ref := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(p*V+v):])))
			g := float64(got[p][v])
			maxAbs = math.Max(maxAbs, math.Abs(g-ref))
			maxRef = math.Max(maxRef, math.Abs(ref))
			if got[p][v] > got[p][best] {
				best = v
			}
			if ref > float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(p*V+bestRef):]))) {
				bestRef = v
			}
		}
		if best == bestRef {
			agree++
		}
	}
	t.Logf("%d positions: max |Δ logit| %.3g (max |logit| %.3g, relative %.2g); argmax equal at %d/%d; transformers: %s", len(ids), maxAbs, maxRef, maxAbs/maxRef, agree, len(ids), strings.TrimSpace(string(info)))
	if agree != len(ids) {
		t.Errorf("argmax differs at %d of %d positions", len(ids)-agree, len(ids))
	}
	if maxAbs/maxRef > 1e-4 {
		t.Errorf("logits differ from transformers' by %.3g relative (> 1e-4)", maxAbs/maxRef)
	}
}
