package format_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/tokenizer"
)

// adversarialTexts are texts a tokenizer gets wrong first: code, runs of
// whitespace, digit runs, accents and other scripts, emoji (multi-byte,
// ZWJ sequences), invalid splits of contractions, and special-token
// strings written as text.
var adversarialTexts = []string{
	"def f(x):\n\treturn x**2  # square\n\n\n    if x >= 10_000: print(f'{x:>8}')\n",
	"   leading and trailing   \n\n\t\t  \r\n",
	"1234567890 3.14159 0x1F 1e-9 2026-12-05 ١٢٣ ½",
	"café naïve Ünïcödé straße ΑΒΓ кириллица 日本語のテキスト 한국어",
	"emoji 👍🏽 👨‍👩‍👧 🏳️‍🌈 ✔️ …",
	"I'm can't we'LL they'Ve it's 'quoted' \"double\"",
	"<|im_start|>user\nhello<|im_end|>\n<|endoftext|> <|im_start|",
	"$ ls -la /tmp && cat file.txt | grep -E '^[a-z]+$' > out 2>&1",
	"control bytes without a token of their own: a\x04b \x06\x13c\x1d d",
	"",
	" ",
}

// TestGGUFTokenizerMatchesLlamaServer builds the tokenizer from the
// SmolLM2-135M-Instruct GGUF's metadata and compares its ids with
// llama-server's /tokenize on the same file: special-token strings as
// text (Encode, parse_special false) and as control tokens
// (EncodeWithSpecials, parse_special true).
func TestGGUFTokenizerMatchesLlamaServer(t *testing.T) {
	path := testenv.MustHaveSmolLM2(t)
	dir := llamaDir(t)
	f, err := format.ReadGGUFMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 49152 {
		t.Fatalf("vocabulary of %d tokens, want 49152", tok.VocabSize())
	}
	url := startLlamaServer(t, dir, path, 512)
	differ := 0
	for _, text := range adversarialTexts {
		for _, special := range []bool{false, true} {
			var tr struct {
				Tokens []int `json:"tokens"`
			}
			body, _ := json.Marshal(map[string]any{"content": text, "add_special": false, "parse_special": special})
			r, err := http.Post(url+"/tokenize", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			err = json.NewDecoder(r.Body).Decode(&tr)
			r.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			want := tok.Encode(text)
			if special {
				want = tok.EncodeWithSpecials(text)
				if !slices.Equal(want, tok.Encode(text)) {
					differ++
				}
			}
			if !slices.Equal(tr.Tokens, want) {
				t.Errorf("parse_special=%v %q:\nllama-server %v\n    compactrl %v", special, text, tr.Tokens, want)
			}
		}
	}
	if differ != 1 {
		t.Errorf("%d texts tokenize differently with special tokens parsed, want 1 (the one with special-token strings)", differ)
	}
}
