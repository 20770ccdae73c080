package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestByteMap(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteRunes[b]
		if seen[r] {
			t.Fatalf("rune %U used twice", r)
		}
		seen[r] = true
		if runeByte(r) != b {
			t.Fatalf("byte %d → %U → %d", b, r, runeByte(r))
		}
	}
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '\t': 'ĉ', 'a': 'a', 0: 'Ā', 0xA0: 'ł', 0xAD: 'Ń', 0x7F: 'ġ', 0xFF: 'ÿ'} {
		if byteRunes[b] != want {
			t.Errorf("byte 0x%02x → %q, want %q", b, byteRunes[b], want)
		}
	}
	if runeByte('€') != -1 {
		t.Error("€ is not a byte rune")
	}
}

func words(p preTokenizer, s string) []string {
	var out []string
	p.split(s, func(w string) { out = append(out, w) })
	return out
}

func TestPreTokenizerVectors(t *testing.T) {
	cases := []struct {
		name string
		p    preTokenizer
		in   string
		want []string
	}{
		{"gpt2-contractions-digits", preGPT2, "Hello world's  test\n\nfoo 123 !!", []string{"Hello", " world", "'s", " ", " test", "\n", "\n", "foo", " 123", " !!"}},
		{"gpt2-uppercase-contraction", preGPT2, "I'LL go   \t", []string{"I", "'", "LL", " go", "   \t"}},
		{"gpt2-tabs", preGPT2, "x\t\ty", []string{"x", "\t", "\t", "y"}},
		{"gpt2-accents-symbols", preGPT2, "ça coûte 3€ !", []string{"ça", " coûte", " 3", "€", " !"}},
		{"llama3-contractions-digit-groups", preLlama3, "Hello world's  test\n\nfoo 12345 !!\n", []string{"Hello", " world", "'s", " ", " test", "\n\n", "foo", " ", "123", "45", " !!\n"}},
		{"llama3-crlf-punctuation", preLlama3, "I'LL (go)\r\n  x", []string{"I", "'LL", " (", "go", ")\r\n", " ", " x"}},
		{"qwen2-single-digits", preQwen2, "ab 12", []string{"ab", " ", "1", "2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := words(c.p, c.in); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%d %q:\n got %q\nwant %q", c.p, c.in, got, c.want)
			}
		})
	}
}

// randomText draws from a character set covering every class the
// pre-tokenizers distinguish.
func randomText(r *rand.Rand, n int) string {
	alphabet := []string{"a", "b", "Z", "é", "ß", "中", "Ω", "0", "7", "٣", "½", " ", " ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000",
		"'", "'s", "'LL", "'re", "!", ".", ",", "-", "€", "😀", "_", "\"", "<|end|>"}
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return sb.String()
}

// TestPreTokenizerMatchesPythonRegex checks the hand-written splitters
// against the patterns themselves, evaluated by Python's regex module.
func TestPreTokenizerMatchesPythonRegex(t *testing.T) {
	if err := exec.Command("python3", "-c", "import regex").Run(); err != nil {
		t.Skip("python3 with the regex module not available")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var texts []string
	for i := 0; i < 300; i++ {
		texts = append(texts, randomText(r, 1+r.IntN(40)))
	}
	in, _ := json.Marshal(texts)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.json"), in, 0o644)
	script := `import json, regex, sys
texts = json.load(open(sys.argv[1]))
pats = json.loads(sys.argv[2])
print(json.dumps({k: [regex.findall(p, s) for s in texts] for k, p in pats.items()}))`
	pats, _ := json.Marshal(map[string]string{"gpt2": patGPT2, "llama3": patLlama3, "qwen2": patQwen2})
	out, err := exec.Command("python3", "-c", script, filepath.Join(dir, "in.json"), string(pats)).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var want map[string][][]string
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]preTokenizer{"gpt2": preGPT2, "llama3": preLlama3, "qwen2": preQwen2} {
		t.Run(name, func(t *testing.T) {
			bad := 0
			for i, s := range texts {
				if got := words(p, s); !reflect.DeepEqual(got, want[name][i]) && bad < 5 {
					bad++
					t.Errorf("%s %q:\n got %q\nwant %q", name, s, got, want[name][i])
				}
			}
		})
	}
}

func TestTrainHandVector(t *testing.T) {
	// words "ab", " ab" ×2, " abc": counts (a,b)=4, (Ġ,a)=3, (b,c)=1 → merge "a b";
	// then (Ġ,ab)=3, (ab,c)=1 → "Ġ ab"; then (Ġab,c)=1 → "Ġab c".
	tok, err := Train([]string{"ab ab ab abc"}, 2+256+3, []string{"<s>", "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"a", "b"}, {"Ġ", "ab"}, {"Ġab", "c"}}
	if got := tok.Merges(); !reflect.DeepEqual(got, want) {
		t.Fatalf("merges %q, want %q", got, want)
	}
	if tok.VocabSize() != 261 || tok.TokenString(258) != "ab" || tok.TokenString(260) != "Ġabc" {
		t.Errorf("vocab %d, 258=%q 260=%q", tok.VocabSize(), tok.TokenString(258), tok.TokenString(260))
	}
	if got := tok.Encode("ab abc a"); !reflect.DeepEqual(got, []int{258, 260, 2 + ' ', 2 + 'a'}) {
		t.Errorf("Encode = %v", got)
	}
	if id, ok := tok.SpecialID("</s>"); !ok || id != 1 || !tok.IsSpecial(1) || tok.IsSpecial(258) {
		t.Errorf("SpecialID(</s>) = %d %v", id, ok)
	}
	if got := tok.Encode("<s>"); len(got) != 3 {
		t.Errorf("Encode interpreted a special: %v", got)
	}
	if got := tok.EncodeWithSpecials("<s>ab</s></s>"); !reflect.DeepEqual(got, []int{0, 258, 1, 1}) {
		t.Errorf("EncodeWithSpecials = %v", got)
	}
	if string(tok.TokenBytes(260)) != " abc" {
		t.Errorf("TokenBytes(260) = %q", tok.TokenBytes(260))
	}
}

func TestTrainErrors(t *testing.T) {
	if _, err := Train(nil, 100, nil); err == nil {
		t.Error("vocab below 256: no error")
	}
	if _, err := Train(nil, 300, []string{"x", "x"}); err == nil {
		t.Error("duplicate special: no error")
	}
	if _, err := Train(nil, 300, []string{"a"}); err == nil {
		t.Error("special equal to a byte token: no error")
	}
	tok, err := Train([]string{"abab"}, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 258 { // "ab", then "abab"
		t.Errorf("vocab %d after running out of pairs, want 258", tok.VocabSize())
	}
}

func corpus(n int) []string {
	r := rand.New(rand.NewPCG(7, 7))
	vocab := strings.Fields("the agent reads file error test passed failed compaction summary step " +
		"def return import main func package value token segment reward 0 1 2 42 100 /app/src main.go")
	var texts []string
	for len(texts) < n {
		var sb strings.Builder
		for i := 0; i < 200; i++ {
			if r.IntN(3) == 0 {
				sb.WriteString(wordOf(r.Uint64N(3000)))
			} else {
				sb.WriteString(vocab[r.IntN(len(vocab))])
			}
			switch r.IntN(10) {
			case 0:
				sb.WriteString("\n")
			case 1:
				sb.WriteString(", ")
			case 2:
				sb.WriteString("(): ")
			default:
				sb.WriteString(" ")
			}
		}
		texts = append(texts, sb.String())
	}
	return texts
}

func TestTrainDeterministicAndRoundTrip(t *testing.T) {
	texts := corpus(50)
	a, err := Train(texts, 600, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Train(texts, 600, []string{"<|endoftext|>"})
	if !reflect.DeepEqual(a.Tokens(), b.Tokens()) || !reflect.DeepEqual(a.Merges(), b.Merges()) {
		t.Fatal("training is not deterministic")
	}
	if a.VocabSize() != 600 {
		t.Errorf("vocab %d, want 600", a.VocabSize())
	}
	total, ntok := 0, 0
	for _, s := range texts {
		ids := a.Encode(s)
		if a.Decode(ids) != s {
			t.Fatalf("round trip failed on %q", s)
		}
		total += len(s)
		ntok += len(ids)
	}
	if ratio := float64(total) / float64(ntok); ratio < 3 {
		t.Errorf("only %.2f bytes a token on the training corpus", ratio)
	}
}

func TestBPEHeapMatchesSimple(t *testing.T) {
	tok, _ := Train(corpus(20), 700, nil)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		w := strings.Repeat("the", r.IntN(30)) + randomText(r, r.IntN(30)) + strings.Repeat("ab", r.IntN(40))
		syms := make([]int32, len(w))
		for j := range syms {
			syms[j] = tok.byteID[w[j]]
		}
		heapOut := tok.bpeHeap(append([]int32(nil), syms...))
		simple := simpleBPE(tok, syms)
		if !reflect.DeepEqual(heapOut, simple) {
			t.Fatalf("%q: heap %v, simple %v", w, heapOut, simple)
		}
	}
}

// simpleBPE is the quadratic loop of bpe without the length switch.
func simpleBPE(t *Tokenizer, syms []int32) []int32 {
	for len(syms) > 1 {
		best, at := int32(-1), -1
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := t.ranks[pair{syms[i], syms[i+1]}]; ok && (best < 0 || m.rank < best) {
				best, at = m.rank, i
			}
		}
		if at < 0 {
			break
		}
		m := t.ranks[pair{syms[at], syms[at+1]}]
		syms = append(syms[:at+1:at+1], syms[at+2:]...)
		syms[at] = m.out
	}
	return syms
}

func TestSaveLoadRoundTrip(t *testing.T) {
	tok, err := Train(corpus(30), 500, []string{"<|endoftext|>", "<|im_start|>"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := tok.Save(path); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	var f map[string]any
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	model := f["model"].(map[string]any)
	if model["type"] != "BPE" || f["pre_tokenizer"].(map[string]any)["type"] != "ByteLevel" || f["decoder"].(map[string]any)["type"] != "ByteLevel" {
		t.Errorf("structure: model %v pre %v decoder %v", model["type"], f["pre_tokenizer"], f["decoder"])
	}
	if v := model["vocab"].(map[string]any); len(v) != 500 || v["Ġ"] != float64(2+' ') || v["<|im_start|>"] != float64(1) {
		t.Errorf("vocab has %d entries, Ġ=%v", len(v), v["Ġ"])
	}
	if m := model["merges"].([]any); len(m) != 500-258 {
		t.Errorf("%d merges, want %d", len(m), 500-258)
	}
	added := f["added_tokens"].([]any)
	if len(added) != 2 || added[1].(map[string]any)["content"] != "<|im_start|>" || added[1].(map[string]any)["special"] != true {
		t.Errorf("added_tokens %v", added)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Tokens(), tok.Tokens()) || !reflect.DeepEqual(back.Merges(), tok.Merges()) || !reflect.DeepEqual(back.Specials(), tok.Specials()) {
		t.Fatal("Load(Save(t)) differs")
	}
	s := corpus(1)[0] + "<|im_start|>x"
	if !reflect.DeepEqual(back.EncodeWithSpecials(s), tok.EncodeWithSpecials(s)) {
		t.Error("encodings differ after reload")
	}
	path2 := filepath.Join(t.TempDir(), "again.json")
	back.Save(path2)
	raw2, _ := os.ReadFile(path2)
	if !bytes.Equal(raw, raw2) {
		t.Error("Save(Load(Save(t))) is not byte-identical")
	}
}

func TestLoadHFStyles(t *testing.T) {
	// A minimal Llama-3 style file: Split + ByteLevel, merges as pairs,
	// added tokens beyond model.vocab, ignore_merges.
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRunes[b])] = b
	}
	vocab["he"], vocab["hel"], vocab["hello"] = 256, 257, 258
	f := map[string]any{
		"added_tokens": []any{map[string]any{"id": 259, "content": "<|begin_of_text|>", "special": true}},
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "ignore_merges": true, "vocab": vocab,
			"merges": [][]string{{"h", "e"}, {"he", "l"}}},
	}
	b, _ := json.Marshal(f)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(path, b, 0o644)
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// "hello" is a vocabulary word: ignore_merges takes it whole; "helx" merges to hel+x.
	if got := tok.EncodeWithSpecials("<|begin_of_text|>hello helx"); !reflect.DeepEqual(got, []int{259, 258, ' ', 257, 'x'}) {
		t.Errorf("encode = %v", got)
	}
	if tok.VocabSize() != 260 {
		t.Errorf("vocab %d", tok.VocabSize())
	}
	out := filepath.Join(t.TempDir(), "re.json")
	if err := tok.Save(out); err != nil {
		t.Fatal(err)
	}
	again, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Encode("hello helx 1234"), tok.Encode("hello helx 1234")) {
		t.Error("re-saved Llama-3 style file encodes differently")
	}

	bad := map[string]string{
		"normalizer": `{"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{}}}`,
		"WordPiece":  `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"WordPiece","vocab":{}}}`,
		"byte token": `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
		"dense":      `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":3},"merges":[]}}`,
		"merge":      `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":["a zz"]}}`,
		"pattern":    `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"x"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"model":{"type":"BPE","vocab":{}}}`,
		"json":       `{"model":`,
	}
	for name, js := range bad {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), name+".json")
			os.WriteFile(p, []byte(js), 0o644)
			if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: err = %v", name, err)
			}
		})
	}
}

var fuzzTok = func() *Tokenizer {
	tok, err := Train(corpus(10), 400, []string{"<|end|>"})
	if err != nil {
		panic(err)
	}
	return tok
}()

func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello world", "\xff\xfe a\x80b", "the  agent\n\n\treads 'LL 123", "<|end|>x<|end|>", "日本語 ½ 😀", strings.Repeat("ab", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := fuzzTok.Encode(s)
		if got := fuzzTok.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		ws := fuzzTok.EncodeWithSpecials(s)
		if got := fuzzTok.Decode(ws); got != s {
			t.Fatalf("Decode(EncodeWithSpecials(%q)) = %q", s, got)
		}
		if want := naiveWithSpecials(fuzzTok, s); len(ws)+len(want) > 0 && !reflect.DeepEqual(ws, want) {
			t.Fatalf("EncodeWithSpecials(%q) = %v, naive %v", s, ws, want)
		}
		for _, p := range []preTokenizer{preGPT2, preLlama3} {
			if strings.Join(words(p, s), "") != s {
				t.Fatalf("pre-tokenizer %d loses bytes of %q", p, s)
			}
		}
		for _, id := range ids {
			if fuzzTok.IsSpecial(id) {
				t.Fatalf("Encode(%q) produced special id %d", s, id)
			}
		}
		_ = utf8.ValidString(s)
	})
}

func BenchmarkEncode(b *testing.B) {
	tok, _ := Train(corpus(200), 4000, nil)
	text := strings.Join(corpus(400), "\n")
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Encode(text)
	}
}

func BenchmarkTrain4k(b *testing.B) {
	var texts []string
	r := rand.New(rand.NewPCG(9, 9))
	// ~2 MB of word-like text with a Zipf vocabulary
	z := rand.NewZipf(r, 1.1, 2, 50000)
	for len(texts) < 2000 {
		var sb strings.Builder
		for sb.Len() < 1000 {
			fmt.Fprintf(&sb, "%s ", wordOf(z.Uint64()))
		}
		texts = append(texts, sb.String())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Train(texts, 4096, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func wordOf(n uint64) string {
	const letters = "etaoinshrdlcumwfgypbvkjxqz"
	var sb strings.Builder
	for n > 0 || sb.Len() == 0 {
		sb.WriteByte(letters[n%26])
		n /= 26
	}
	return sb.String()
}

// naiveWithSpecials is EncodeWithSpecials by repeated search: the earliest
// special occurrence, the longest at that position.
func naiveWithSpecials(t *Tokenizer, text string) []int {
	var out []int
	atStart := true
	for text != "" {
		pos, sp := -1, ""
		for _, s := range t.Specials() {
			if k := strings.Index(text, s); k >= 0 && (pos < 0 || k < pos || (k == pos && len(s) > len(sp))) {
				pos, sp = k, s
			}
		}
		if pos < 0 {
			return t.appendEncode(out, text, atStart)
		}
		out = t.appendEncode(out, text[:pos], atStart)
		id, _ := t.SpecialID(sp)
		out = append(out, id)
		text = text[pos+len(sp):]
		atStart = false
	}
	return out
}

func TestEncodeWithOverlappingSpecials(t *testing.T) {
	tok, err := Train([]string{"abc abc"}, 270, []string{"<a>", "<a>b", "b>", "<<"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"x<a>by<a>b>", "<<a>", "<<<a>", "b>b><", "<a", "plain"} {
		got, want := tok.EncodeWithSpecials(s), naiveWithSpecials(tok, s)
		if !reflect.DeepEqual(got, want) || tok.Decode(got) != s {
			t.Errorf("%q: got %v, want %v", s, got, want)
		}
	}
	ids := tok.EncodeWithSpecials("<a>b<a>")
	if id1, _ := tok.SpecialID("<a>b"); len(ids) != 2 || ids[0] != id1 {
		t.Errorf("longest match: %v", ids)
	}
}

func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "t.json")
	if err := fuzzTok.Save(path); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add([]byte(`{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","a"]]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := parseHF(b, false)
		if err != nil {
			return
		}
		s := "hello <|end|> wörld \xff"
		if got := tok.Decode(tok.Encode(s)); got != s && !tok.addPrefixSpace {
			t.Fatalf("loaded tokenizer does not round-trip: %q", got)
		}
	})
}

func TestConcurrentEncode(t *testing.T) {
	tok, _ := Train(corpus(10), 400, []string{"<|end|>"})
	texts := corpus(8)
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	fresh, _ := Train(corpus(10), 400, []string{"<|end|>"})
	var wg sync.WaitGroup
	errs := make(chan string, len(texts))
	for i, s := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := fresh.Encode(s); !reflect.DeepEqual(got, want[i]) {
				errs <- s
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode differs on %.40q…", s)
	}
}
