package format

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/tokenizer"
)

func TestPermuteQKHandVector(t *testing.T) {
	// one head of dim 4, 2 columns: rows r0 r1 | r2 r3 (halves) → r0 r2 r1 r3
	w := []float32{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5}
	got, err := PermuteQK(w, 4, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{0, 0.5, 2, 2.5, 1, 1.5, 3, 3.5}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// two heads of dim 4, one column: each head permuted on its own
	got, _ = PermuteQK([]float32{0, 1, 2, 3, 4, 5, 6, 7}, 8, 1, 2)
	if want := []float32{0, 2, 1, 3, 4, 6, 5, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("two heads: got %v, want %v", got, want)
	}
	if _, err := PermuteQK(w, 4, 2, 3); err == nil {
		t.Error("heads not dividing rows: no error")
	}
}

func TestGGUFName(t *testing.T) {
	for hf, want := range map[string]string{
		"model.embed_tokens.weight":                      "token_embd.weight",
		"model.layers.11.self_attn.o_proj.weight":        "blk.11.attn_output.weight",
		"model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
		"model.layers.3.mlp.down_proj.weight":            "blk.3.ffn_down.weight",
		"lm_head.weight":                                 "output.weight",
		"model.norm.weight":                              "output_norm.weight",
	} {
		t.Run(hf, func(t *testing.T) {
			if got, ok := GGUFName(hf); !ok || got != want {
				t.Errorf("GGUFName(%q) = %q, %v; want %q", hf, got, ok, want)
			}
		})
	}
	if _, ok := GGUFName("score.weight"); ok {
		t.Error("score.weight has no GGUF name")
	}
}

// testCheckpoint returns a config and HF-named tensors with values that
// identify their position (name hash + index), so layout errors show.
func testCheckpoint(tied bool) (LlamaConfig, []Tensor) {
	cfg := NewLlamaConfig(300, 16, 24, 2, 4, 2, 64)
	cfg.TieWordEmbeddings = tied
	var ts []Tensor
	add := func(name string, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(len(ts)) + float32(i)/float32(n)
		}
		ts = append(ts, Tensor{Name: name, Shape: shape, Data: data})
	}
	add("model.embed_tokens.weight", 300, 16)
	for l := 0; l < 2; l++ {
		p := "model.layers." + strconv.Itoa(l) + "."
		add(p+"input_layernorm.weight", 16)
		add(p+"self_attn.q_proj.weight", 16, 16)
		add(p+"self_attn.k_proj.weight", 8, 16)
		add(p+"self_attn.v_proj.weight", 8, 16)
		add(p+"self_attn.o_proj.weight", 16, 16)
		add(p+"post_attention_layernorm.weight", 16)
		add(p+"mlp.gate_proj.weight", 24, 16)
		add(p+"mlp.up_proj.weight", 24, 16)
		add(p+"mlp.down_proj.weight", 16, 24)
	}
	add("model.norm.weight", 16)
	if !tied {
		add("lm_head.weight", 300, 16)
	}
	return cfg, ts
}

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	tok, err := tokenizer.Train([]string{"the cat sat on the mat; the dog sat on the log. ab ab ab"}, 290, []string{"<|endoftext|>", "<|im_start|>"})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ggufLayout is testCheckpoint's tensor hf as WriteGGUF stores it: q and k
// rows permuted to llama.cpp's RoPE layout (4 heads, 2 KV heads of width 4).
func ggufLayout(hf Tensor) []float32 {
	switch {
	case strings.HasSuffix(hf.Name, "q_proj.weight"):
		w, _ := PermuteQK(hf.Data, 16, 16, 4)
		return w
	case strings.HasSuffix(hf.Name, "k_proj.weight"):
		w, _ := PermuteQK(hf.Data, 8, 16, 2)
		return w
	}
	return hf.Data
}

func TestGGUFRoundTrip(t *testing.T) {
	for _, tied := range []bool{false, true} {
		t.Run(fmt.Sprintf("tied=%v", tied), func(t *testing.T) {
			cfg, ts := testCheckpoint(tied)
			tok := testTokenizer(t)
			withExtras := append(ts[:len(ts):len(ts)], Tensor{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", Shape: []int{2}, Data: []float32{1, 0.01}})
			if tied {
				withExtras = append(withExtras, Tensor{Name: "lm_head.weight", Shape: []int{300, 16}, Data: make([]float32, 300*16)})
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := WriteGGUF(path, cfg, withExtras, tok); err != nil {
				t.Fatal(err)
			}
			meta, gts, err := ReadGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			wantMeta := map[string]any{
				"general.architecture":                   "llama",
				"general.alignment":                      uint32(32),
				"llama.context_length":                   uint32(64),
				"llama.embedding_length":                 uint32(16),
				"llama.block_count":                      uint32(2),
				"llama.feed_forward_length":              uint32(24),
				"llama.attention.head_count":             uint32(4),
				"llama.attention.head_count_kv":          uint32(2),
				"llama.rope.dimension_count":             uint32(4),
				"llama.rope.freq_base":                   float32(10000),
				"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
				"llama.vocab_size":                       uint32(300),
				"tokenizer.ggml.model":                   "gpt2",
				"tokenizer.ggml.pre":                     "gpt-2",
				"tokenizer.ggml.eos_token_id":            uint32(0),
				"tokenizer.ggml.add_bos_token":           false,
			}
			for k, v := range wantMeta {
				if !reflect.DeepEqual(meta[k], v) {
					t.Errorf("%s = %#v, want %#v", k, meta[k], v)
				}
			}
			toks := meta["tokenizer.ggml.tokens"].([]string)
			types := meta["tokenizer.ggml.token_type"].([]int32)
			if len(toks) != 300 || len(types) != 300 || toks[1] != "<|im_start|>" || types[1] != 3 || types[2] != 1 || toks[2+' '] != "Ġ" || toks[299] != "[PAD299]" || types[299] != 5 {
				t.Errorf("tokens %d types %d: %q %v %q", len(toks), len(types), toks[:3], types[:3], toks[299])
			}
			if merges := meta["tokenizer.ggml.merges"].([]string); len(merges) != len(tok.Merges()) || merges[0] != tok.Merges()[0][0]+" "+tok.Merges()[0][1] {
				t.Errorf("merges %v", merges[:1])
			}
			byName := map[string]Tensor{}
			for _, g := range gts {
				byName[g.Name] = g
			}
			wantCount := len(ts)
			if _, has := byName["output.weight"]; has == tied {
				t.Errorf("tied=%v but output.weight present=%v", tied, has)
			}
			if len(gts) != wantCount {
				t.Errorf("%d GGUF tensors, want %d", len(gts), wantCount)
			}
			for _, hf := range ts {
				name, _ := GGUFName(hf.Name)
				g := byName[name]
				if !reflect.DeepEqual(g.Shape, hf.Shape) {
					t.Errorf("%s: shape %v, want %v", name, g.Shape, hf.Shape)
					continue
				}
				if want := ggufLayout(hf); !reflect.DeepEqual(g.Data, want) {
					t.Errorf("%s: data differs", name)
				}
			}
			if gts[0].Name != "token_embd.weight" || gts[1].Name != "blk.0.attn_norm.weight" {
				t.Errorf("tensor order starts %s, %s", gts[0].Name, gts[1].Name)
			}
			b, _ := os.ReadFile(path)
			f, _ := ParseGGUFHeader(b)
			if f.Version != 3 || f.DataOffset%32 != 0 {
				t.Errorf("version %d, data offset %d", f.Version, f.DataOffset)
			}
		})
	}
}

// TestGGUFMatrixTypes writes a checkpoint with F16 and BF16 matrices and
// reads it back: every matrix is of that type and holds the source rounded
// as appendAs rounds it (TestEncodeMatchesGGUFPackage checks that against
// the gguf package), the norms stay F32 and exact, general.file_type names
// the type; a type llama.cpp's converter does not write whole is refused.
func TestGGUFMatrixTypes(t *testing.T) {
	cfg, ts := testCheckpoint(false)
	for _, t := range ts {
		for i := range t.Data {
			t.Data[i] = t.Data[i]/3 + 1e-3 // off the F16 and BF16 grids
		}
	}
	tok := testTokenizer(t)
	for _, c := range []struct {
		typ, ftype uint32
		round      func(float32) float32
	}{
		{GGMLTypeF16, 1, func(v float32) float32 { return HalfToFloat32(Float32ToHalf(v)) }},
		{GGMLTypeBF16, 32, func(v float32) float32 { return math.Float32frombits(uint32(kernel.BF16(v)) << 16) }},
	} {
		t.Run(GGMLTypeName(c.typ), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := WriteGGUFWith(path, cfg, ts, tok, GGUFOptions{Matrices: c.typ}); err != nil {
				t.Fatal(err)
			}
			f, err := ReadGGUFMeta(path)
			if err != nil {
				t.Fatal(err)
			}
			if ft := f.Meta["general.file_type"]; ft != c.ftype {
				t.Errorf("general.file_type %v, want %d", ft, c.ftype)
			}
			_, gts, err := ReadGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]Tensor{}
			for _, g := range gts {
				byName[g.Name] = g
			}
			matrices := 0
			for i, info := range f.Tensors {
				want := GGMLTypeF32
				if len(info.Shape) == 2 {
					want = int(c.typ)
					matrices++
				}
				if int(info.Type) != want {
					t.Errorf("tensor %d %s: type %s, want %s", i, info.Name, GGMLTypeName(info.Type), GGMLTypeName(uint32(want)))
				}
			}
			if matrices == 0 || matrices == len(f.Tensors) {
				t.Fatalf("%d of %d tensors are matrices", matrices, len(f.Tensors))
			}
			for _, hf := range ts {
				name, _ := GGUFName(hf.Name)
				src := ggufLayout(hf)
				got, rounded := byName[name].Data, 0
				for j, v := range src {
					want := v
					if len(hf.Shape) == 2 {
						want = c.round(v)
					}
					if got[j] != want {
						t.Fatalf("%s[%d] = %v, want %v (source %v)", name, j, got[j], want, v)
					}
					if want != v {
						rounded++
					}
				}
				if len(hf.Shape) == 2 && rounded == 0 {
					t.Errorf("%s: no value was rounded; the test checks nothing", name)
				}
			}
		})
	}
	err := WriteGGUFWith(filepath.Join(t.TempDir(), "q.gguf"), cfg, ts, tok, GGUFOptions{Matrices: GGMLTypeQ4_1})
	if err == nil || !strings.Contains(err.Error(), "matrix type Q4_1: want F32, F16 or BF16") {
		t.Errorf("Q4_1 matrices: %v", err)
	}
}

func TestWriteGGUFRejects(t *testing.T) {
	tok := testTokenizer(t)
	dir := t.TempDir()
	cases := map[string]func(cfg *LlamaConfig, ts *[]Tensor){
		"missing tensors": func(cfg *LlamaConfig, ts *[]Tensor) { *ts = (*ts)[1:] },
		"not part of a LlamaForCausalLM": func(cfg *LlamaConfig, ts *[]Tensor) {
			*ts = append(*ts, Tensor{Name: "score.weight", Shape: []int{1, 16}, Data: make([]float32, 16)})
		},
		"config implies": func(cfg *LlamaConfig, ts *[]Tensor) { (*ts)[1].Shape = []int{2, 8} },
		"tokenizer has":  func(cfg *LlamaConfig, ts *[]Tensor) { cfg.VocabSize = 100 },
		"given twice":    func(cfg *LlamaConfig, ts *[]Tensor) { *ts = append(*ts, (*ts)[0]) },
		"model_type":     func(cfg *LlamaConfig, ts *[]Tensor) { cfg.ModelType = "gpt2" },
	}
	for want, mut := range cases {
		t.Run(want, func(t *testing.T) {
			cfg, ts := testCheckpoint(false)
			mut(&cfg, &ts)
			path := filepath.Join(dir, "bad.gguf")
			err := WriteGGUF(path, cfg, ts, tok)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: err = %v", want, err)
			}
			if _, statErr := os.Stat(path); statErr == nil {
				t.Errorf("%s: file left behind", want)
			}
		})
	}
}

func TestParseGGUFCorrupt(t *testing.T) {
	cfg, ts := testCheckpoint(true)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := WriteGGUF(path, cfg, ts, testTokenizer(t)); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	f, _ := ParseGGUFHeader(good)
	for _, cut := range []int{3, 10, 30, 200, int(f.DataOffset) - 5, len(good) - 1} {
		t.Run(fmt.Sprintf("cut=%d", cut), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "cut.gguf")
			os.WriteFile(p, good[:cut], 0o644)
			if _, _, err := ReadGGUF(p); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("truncated at %d: err = %v", cut, err)
			}
		})
	}
	bad := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bad[4:], 7)
	if _, err := ParseGGUFHeader(bad); err == nil || !strings.Contains(err.Error(), "version 7") {
		t.Errorf("bad version: %v", err)
	}
	bad = append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(bad[16:], 1<<40) // kv count
	if _, err := ParseGGUFHeader(bad); err == nil {
		t.Error("huge kv count: no error")
	}
}

func FuzzParseGGUFHeader(f *testing.F) {
	cfg, ts := testCheckpoint(true)
	path := filepath.Join(f.TempDir(), "m.gguf")
	if err := WriteGGUF(path, cfg, ts, testTokenizer(f)); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	hdr, _ := ParseGGUFHeader(good)
	f.Add(good[:hdr.DataOffset+64])
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseGGUFHeader(b)
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			g.tensorData(b, ti) // must not panic
		}
	})
}

// llamaDir returns $COMPACTRL_LLAMA_DIR, skipping the test when unset
// (failing it under CI=true).
func llamaDir(t *testing.T) string {
	return testenv.MustHaveLlama(t)
}

// TestReadLlamaCppRandomModel parses the random model llama.cpp's own
// test-llama-archs writes and checks its metadata against its tensors.
func TestReadLlamaCppRandomModel(t *testing.T) {
	dir := llamaDir(t)
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(dir, "run"), filepath.Join(dir, "root/usr/libexec/x86_64-linux-gnu/llama.cpp-tests/test-llama-archs"), "-a", "^llama$", "-s", "3", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("test-llama-archs: %v\n%s", err, b)
	}
	meta, ts, err := ReadGGUF(filepath.Join(out, "llama-dense.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if meta["general.architecture"] != "llama" {
		t.Errorf("architecture %v", meta["general.architecture"])
	}
	vocab := int(meta["llama.vocab_size"].(uint32))
	embd := int(meta["llama.embedding_length"].(uint32))
	ff := int(meta["llama.feed_forward_length"].(uint32))
	blocks := int(meta["llama.block_count"].(uint32))
	heads := int(meta["llama.attention.head_count"].(uint32))
	kl := int(meta["llama.attention.key_length"].(uint32))
	if n := len(meta["tokenizer.ggml.tokens"].([]string)); n != vocab {
		t.Errorf("%d tokens, vocab_size %d", n, vocab)
	}
	byName := map[string]Tensor{}
	for _, x := range ts {
		byName[x.Name] = x
		if x.NumElements() != len(x.Data) {
			t.Errorf("%s: shape %v, %d values", x.Name, x.Shape, len(x.Data))
		}
	}
	check := func(name string, shape ...int) {
		x, ok := byName[name]
		if !ok {
			t.Errorf("no tensor %s", name)
		} else if !reflect.DeepEqual(x.Shape, shape) {
			t.Errorf("%s: shape %v, want %v", name, x.Shape, shape)
		}
	}
	check("token_embd.weight", vocab, embd)
	check("output_norm.weight", embd)
	for l := 0; l < blocks; l++ {
		p := "blk." + strconv.Itoa(l) + "."
		check(p+"attn_q.weight", heads*kl, embd)
		check(p+"ffn_gate.weight", ff, embd)
		check(p+"ffn_down.weight", embd, ff)
	}
	nonzero := 0
	for _, v := range byName["token_embd.weight"].Data {
		if v != 0 {
			nonzero++
		}
	}
	if nonzero < len(byName["token_embd.weight"].Data)/2 {
		t.Errorf("token_embd mostly zero (%d nonzero): data offsets wrong?", nonzero)
	}
}

func TestUnpermuteQKInvertsPermuteQK(t *testing.T) {
	w := make([]float32, 12*3)
	for i := range w {
		w[i] = float32(i)
	}
	p, err := PermuteQK(w, 12, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnpermuteQK(p, 12, 3, 3)
	if err != nil || !reflect.DeepEqual(back, w) {
		t.Fatalf("UnpermuteQK(PermuteQK(w)) = %v, %v", back, err)
	}
	if reflect.DeepEqual(p, w) {
		t.Fatal("PermuteQK left the rows in place")
	}
}

// TestReadGGUFMetaReadsAPrefix: the header read from a growing prefix of
// the file (from 16 bytes, so it grows several times) equals the header
// of the whole file, and a file cut inside its header gives the whole
// file's error.
func TestReadGGUFMetaReadsAPrefix(t *testing.T) {
	cfg, ts := testCheckpoint(true)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := WriteGGUF(path, cfg, ts, testTokenizer(t)); err != nil {
		t.Fatal(err)
	}
	whole, _ := os.ReadFile(path)
	want, err := ParseGGUFHeader(whole)
	if err != nil {
		t.Fatal(err)
	}
	for _, first := range []int64{16, 1 << 20} {
		got, err := readGGUFMeta(path, first)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("first %d: header differs from the whole file's (%v)", first, err)
		}
	}
	cut := filepath.Join(t.TempDir(), "cut.gguf")
	os.WriteFile(cut, whole[:want.DataOffset-5], 0o644)
	_, wantErr := ParseGGUFHeader(whole[:want.DataOffset-5])
	if _, err := readGGUFMeta(cut, 16); err == nil || wantErr == nil || !strings.Contains(err.Error(), wantErr.Error()) {
		t.Fatalf("cut file: %v, want %v", err, wantErr)
	}
}
