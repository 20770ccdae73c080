package format_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/tokenizer"
)

// refForward is an independent float64 Hugging Face LlamaForCausalLM
// forward pass over HF-named tensors: it returns the logits [len(ids)][vocab].
//
//	x = E[ids];  per layer: x += Wo·attn(RoPE(Wq·n1), RoPE(Wk·n1), Wv·n1),
//	             x += Wd·(silu(Wg·n2) ⊙ Wu·n2),  n = rmsnorm(x)·w
//	logits = lm_head · rmsnorm(x)·w_final
//
// RoPE is rotate_half: pairs (j, j+d/2) rotate by pos·θ^(−2j/d).
func refForward(cfg format.LlamaConfig, ts []format.Tensor, ids []int) [][]float64 {
	w := map[string]format.Tensor{}
	for _, t := range ts {
		w[t.Name] = t
	}
	h, nh, nkv, hd := cfg.HiddenSize, cfg.NumAttentionHeads, cfg.KVHeads(), cfg.HeadDimension()
	T := len(ids)
	matvec := func(name string, x []float64) []float64 {
		t := w[name]
		rows, cols := t.Shape[0], t.Shape[1]
		out := make([]float64, rows)
		for r := 0; r < rows; r++ {
			s := 0.0
			for c := 0; c < cols; c++ {
				s += float64(t.Data[r*cols+c]) * x[c]
			}
			out[r] = s
		}
		return out
	}
	rmsnorm := func(name string, x []float64) []float64 {
		ss := 0.0
		for _, v := range x {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(len(x))+cfg.RMSNormEps)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v * inv * float64(w[name].Data[i])
		}
		return out
	}
	rope := func(v []float64, heads, pos int) {
		half := hd / 2
		for hh := 0; hh < heads; hh++ {
			base := hh * hd
			for j := 0; j < half; j++ {
				ang := float64(pos) * math.Pow(cfg.RopeTheta, -float64(2*j)/float64(hd))
				c, s := math.Cos(ang), math.Sin(ang)
				a, b := v[base+j], v[base+j+half]
				v[base+j], v[base+j+half] = a*c-b*s, b*c+a*s
			}
		}
	}
	x := make([][]float64, T)
	emb := w["model.embed_tokens.weight"]
	for t, id := range ids {
		x[t] = make([]float64, h)
		for i := range x[t] {
			x[t][i] = float64(emb.Data[id*h+i])
		}
	}
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		p := "model.layers." + strconv.Itoa(l) + "."
		q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range ids {
			n := rmsnorm(p+"input_layernorm.weight", x[t])
			q[t], k[t], v[t] = matvec(p+"self_attn.q_proj.weight", n), matvec(p+"self_attn.k_proj.weight", n), matvec(p+"self_attn.v_proj.weight", n)
			rope(q[t], nh, t)
			rope(k[t], nkv, t)
		}
		for t := range ids {
			att := make([]float64, nh*hd)
			for hh := 0; hh < nh; hh++ {
				kh := hh / (nh / nkv)
				scores := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					d := 0.0
					for i := 0; i < hd; i++ {
						d += q[t][hh*hd+i] * k[s][kh*hd+i]
					}
					scores[s] = d / math.Sqrt(float64(hd))
					mx = math.Max(mx, scores[s])
				}
				z := 0.0
				for s := range scores {
					scores[s] = math.Exp(scores[s] - mx)
					z += scores[s]
				}
				for s := range scores {
					for i := 0; i < hd; i++ {
						att[hh*hd+i] += scores[s] / z * v[s][kh*hd+i]
					}
				}
			}
			o := matvec(p+"self_attn.o_proj.weight", att)
			for i := range o {
				x[t][i] += o[i]
			}
			n2 := rmsnorm(p+"post_attention_layernorm.weight", x[t])
			g, u := matvec(p+"mlp.gate_proj.weight", n2), matvec(p+"mlp.up_proj.weight", n2)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			d := matvec(p+"mlp.down_proj.weight", g)
			for i := range d {
				x[t][i] += d[i]
			}
		}
	}
	head := "lm_head.weight"
	if cfg.TieWordEmbeddings {
		head = "model.embed_tokens.weight"
	}
	logits := make([][]float64, T)
	for t := range ids {
		logits[t] = matvec(head, rmsnorm("model.norm.weight", x[t]))
	}
	return logits
}

func logSoftmax(z []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range z {
		mx = math.Max(mx, v)
	}
	s := 0.0
	for _, v := range z {
		s += math.Exp(v - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = v - lse
	}
	return out
}

// randomCheckpoint draws weights with spread-out logits (so greedy choices
// are not near-ties): unit-variance embeddings, 1/√fan_in matrices, norm
// weights near 1.
func randomCheckpoint(cfg format.LlamaConfig, seed uint64) []format.Tensor {
	r := rand.New(rand.NewPCG(seed, 1))
	var ts []format.Tensor
	mat := func(name string, rows, cols int, std float64) {
		d := make([]float32, rows*cols)
		for i := range d {
			d[i] = float32(std * r.NormFloat64())
		}
		ts = append(ts, format.Tensor{Name: name, Shape: []int{rows, cols}, Data: d})
	}
	norm := func(name string, n int) {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(1 + 0.2*r.NormFloat64())
		}
		ts = append(ts, format.Tensor{Name: name, Shape: []int{n}, Data: d})
	}
	h, ff, hd := cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDimension()
	mat("model.embed_tokens.weight", cfg.VocabSize, h, 1)
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		p := "model.layers." + strconv.Itoa(l) + "."
		norm(p+"input_layernorm.weight", h)
		mat(p+"self_attn.q_proj.weight", cfg.NumAttentionHeads*hd, h, 1.5/math.Sqrt(float64(h)))
		mat(p+"self_attn.k_proj.weight", cfg.KVHeads()*hd, h, 1.5/math.Sqrt(float64(h)))
		mat(p+"self_attn.v_proj.weight", cfg.KVHeads()*hd, h, 1/math.Sqrt(float64(h)))
		mat(p+"self_attn.o_proj.weight", h, cfg.NumAttentionHeads*hd, 1/math.Sqrt(float64(h)))
		norm(p+"post_attention_layernorm.weight", h)
		mat(p+"mlp.gate_proj.weight", ff, h, 1/math.Sqrt(float64(h)))
		mat(p+"mlp.up_proj.weight", ff, h, 1/math.Sqrt(float64(h)))
		mat(p+"mlp.down_proj.weight", h, ff, 1/math.Sqrt(float64(ff)))
	}
	norm("model.norm.weight", h)
	if !cfg.TieWordEmbeddings {
		mat("lm_head.weight", cfg.VocabSize, h, 1/math.Sqrt(float64(h)))
	}
	return ts
}

func llamaDir(t *testing.T) string {
	return testenv.MustHaveLlama(t)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startLlamaServer runs llama-server on model on a free 127.0.0.1 port
// until the test ends and returns its base URL once /health answers 200.
// The KV cache is float32 and flash attention off: llama.cpp's defaults
// (f16 cache; CPU flash attention, which rounds to f16) each move
// log-probs of a random model by 2–4e-2; with both off the gap is ~2e-5.
func startLlamaServer(t *testing.T, dir, modelPath string, ctxLen int) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "run"), filepath.Join(dir, "root/usr/bin/llama-server"),
		"-m", modelPath, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "-t", testenv.LlamaThreads, "--no-webui",
		"-c", strconv.Itoa(ctxLen), "-np", "1", "-ctk", "f32", "-ctv", "f32", "-fa", "off")
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := testenv.StartGroup(cmd); err != nil {
		cancel()
		t.Fatalf("start llama-server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("llama-server exited: %v\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("llama-server not healthy after 60 s\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type topLogprob struct {
	ID      int     `json:"id"`
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
}

type completionResponse struct {
	Choices []struct {
		Logprobs struct {
			Content []struct {
				topLogprob
				TopLogprobs []topLogprob `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// nextToken asks the server for one greedy token after prompt and returns
// the top-k log-probabilities of that position (llama.cpp reports them from
// the raw logits, before logit_bias). ban is a logit_bias that keeps the
// sampled token off byte tokens of incomplete UTF-8: llama-server holds
// such a token back waiting for the rest of the character and, with
// max_tokens 1, returns no logprobs at all.
func nextToken(url string, prompt []int, k int, ban map[string]any) ([]topLogprob, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": k, "logit_bias": ban})
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b.String())
	}
	var cr completionResponse
	if err := json.Unmarshal(b.Bytes(), &cr); err != nil {
		return nil, fmt.Errorf("%w: %s", err, b.String())
	}
	if len(cr.Choices) != 1 || len(cr.Choices[0].Logprobs.Content) != 1 || len(cr.Choices[0].Logprobs.Content[0].TopLogprobs) == 0 {
		return nil, fmt.Errorf("unexpected response shape: %s", b.String())
	}
	return cr.Choices[0].Logprobs.Content[0].TopLogprobs, nil
}

// TestLlamaServerParity exports a random checkpoint with a trained
// tokenizer to GGUF, serves it with llama.cpp, and checks the next-token
// log-probabilities at every prefix of a sequence against the float64
// reference forward and the built-in model.
func TestLlamaServerParity(t *testing.T) {
	dir := llamaDir(t)
	tok, err := tokenizer.Train([]string{"the agent reads the file, runs the test, and writes a summary of the state.\n"}, 320, []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("tied/gqa/gpt2", func(t *testing.T) {
		cfg := format.NewLlamaConfig(tok.VocabSize(), 64, 96, 2, 4, 2, 512)
		cfg.TieWordEmbeddings = true
		eos := 2
		cfg.EosTokenID = &eos
		serverParity(t, dir, cfg, tok, 200, format.GGMLTypeF32)
	})
	t.Run("tied/gqa/gpt2/bf16", func(t *testing.T) {
		cfg := format.NewLlamaConfig(tok.VocabSize(), 64, 96, 2, 4, 2, 512)
		cfg.TieWordEmbeddings = true
		serverParity(t, dir, cfg, tok, 64, format.GGMLTypeBF16)
	})
	if testing.Short() {
		return
	}
	t.Run("untied/mha/llama3", func(t *testing.T) {
		cfg := format.NewLlamaConfig(tok.VocabSize(), 48, 64, 1, 3, 3, 256)
		cfg.RopeTheta, cfg.RMSNormEps = 500000, 1e-6
		serverParity(t, dir, cfg, llama3Style(t, tok), 80, format.GGMLTypeF32)
	})
}

// llama3Style returns tok with Llama-3's pre-tokenizer (Split + ByteLevel),
// through a tokenizer.json round trip.
func llama3Style(t *testing.T, tok *tokenizer.Tokenizer) *tokenizer.Tokenizer {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := tok.Save(path); err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "behavior": "Isolated", "invert": false, "pattern": map[string]any{
			"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
	}}
	b, _ = json.Marshal(f)
	os.WriteFile(path, b, 0o644)
	l3, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if l3.PreTokenizer() != "llama3" {
		t.Fatalf("pre-tokenizer %s", l3.PreTokenizer())
	}
	return l3
}

// serverParity serves a random checkpoint of cfg, its matrices stored as
// ggml type matrices, with llama.cpp and compares n next-token
// distributions with the reference (and the built-in model), and
// llama.cpp's tokenisation with tok's. With BF16 matrices llama.cpp's
// products take bfloat16 weights and activations, as the built-in model's
// do under model.precision bf16: the two are compared with each other
// closely, and each with the float32 reference within bfloat16's error.
func serverParity(t *testing.T, dir string, cfg format.LlamaConfig, tok *tokenizer.Tokenizer, n int, matrices uint32) {
	ts := randomCheckpoint(cfg, 11)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := format.WriteGGUFWith(path, cfg, ts, tok, format.GGUFOptions{Matrices: matrices}); err != nil {
		t.Fatal(err)
	}
	bf16 := matrices == format.GGMLTypeBF16
	url := startLlamaServer(t, dir, path, cfg.MaxPositionEmbeddings)

	checkTokenize(t, url, tok, "The agent's 3 tests failed:\n\tfoo(bar)  --  café 12345 summary!\n\n  THE END'LL")
	r := rand.New(rand.NewPCG(5, 5))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(cfg.VocabSize)
	}
	ref := refForward(cfg, ts, ids)

	builtin := builtinLogits(t, cfg, ts, ids, bf16)

	ban := map[string]any{}
	for id := 0; id < tok.VocabSize(); id++ {
		if !utf8.Valid(tok.TokenBytes(id)) {
			ban[strconv.Itoa(id)] = false
		}
	}
	agree, maxDiff, maxDiffModel, maxDiffEngines := 0, 0.0, 0.0, 0.0
	var sumDiff, sumDiffEngines float64
	terms := 0
	for pos := 0; pos < n; pos++ {
		lp := logSoftmax(ref[pos])
		best := 0
		for v := range lp {
			if lp[v] > lp[best] {
				best = v
			}
		}
		top, err := nextToken(url, ids[:pos+1], 5, ban)
		if err != nil {
			t.Fatalf("position %d: %v", pos, err)
		}
		if top[0].ID == best {
			agree++
		}
		bl := logSoftmax(builtin[pos])
		for _, e := range top {
			maxDiff = math.Max(maxDiff, math.Abs(e.Logprob-lp[e.ID]))
			maxDiffEngines = math.Max(maxDiffEngines, math.Abs(e.Logprob-bl[e.ID]))
			sumDiff += math.Abs(e.Logprob - lp[e.ID])
			sumDiffEngines += math.Abs(e.Logprob - bl[e.ID])
			terms++
		}
		for v := range lp {
			maxDiffModel = math.Max(maxDiffModel, math.Abs(bl[v]-lp[v]))
		}
		if pos == 0 {
			t.Logf("position 0: llama.cpp top %d (%.5f) %q, reference %d (%.5f)", top[0].ID, top[0].Logprob, top[0].Token, best, lp[best])
		}
	}
	frac := float64(agree) / float64(n)
	t.Logf("%d positions: greedy agreement %.3f, max |Δ logprob| of the top 5, llama.cpp vs reference: %.2e", n, frac, maxDiff)
	t.Logf("built-in model vs reference, max |Δ logprob| over the vocabulary: %.2e", maxDiffModel)
	t.Logf("llama.cpp vs built-in model, max |Δ logprob| of the top 5: %.2e", maxDiffEngines)
	t.Logf("mean |Δ logprob| of the top 5: llama.cpp vs reference %.2e, vs built-in model %.2e", sumDiff/float64(terms), sumDiffEngines/float64(terms))
	// Tolerances: float32 products; with bf16, bfloat16's 8 significant bits on this random model,
	// whose log-probs move by 5e-2 on average (up to 0.36) when any engine rounds its products, so
	// two bf16 engines that sum in different orders differ from each other as much as from float32.
	refTol, modelTol, meanTol, agreeMin := 1e-2, 1e-3, 1e-3, 0.99
	if bf16 {
		refTol, modelTol, meanTol, agreeMin = 0.6, 0.6, 0.1, 0.95
	}
	if mean := sumDiff / float64(terms); mean >= meanTol {
		t.Errorf("llama.cpp log-probs differ from the reference by %.3g on average ≥ %v", mean, meanTol)
	}
	if frac < agreeMin {
		t.Errorf("greedy agreement %.3f < %v", frac, agreeMin)
	}
	if maxDiff >= refTol {
		t.Errorf("llama.cpp log-probs differ from the reference by %.3g ≥ %v", maxDiff, refTol)
	}
	if maxDiffModel >= modelTol {
		t.Errorf("built-in model log-probs differ from the reference by %.3g ≥ %v", maxDiffModel, modelTol)
	}
}

// checkTokenize compares llama.cpp's tokenisation and detokenisation of
// text (from the GGUF vocabulary, merges and pre-tokenizer) with tok's.
func checkTokenize(t *testing.T, url string, tok *tokenizer.Tokenizer, text string) {
	post := func(path string, req any, resp any) {
		body, _ := json.Marshal(req)
		r, err := http.Post(url+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		if err := json.NewDecoder(r.Body).Decode(resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var tr struct {
		Tokens []int `json:"tokens"`
	}
	post("/tokenize", map[string]any{"content": text, "add_special": false}, &tr)
	if want := tok.Encode(text); !slices.Equal(tr.Tokens, want) {
		t.Errorf("llama.cpp /tokenize %q:\n got %v\nwant %v", text, tr.Tokens, want)
	}
	var dr struct {
		Content string `json:"content"`
	}
	post("/detokenize", map[string]any{"tokens": tok.Encode(text)}, &dr)
	if dr.Content != text {
		t.Errorf("llama.cpp /detokenize = %q, want %q", dr.Content, text)
	}
}
