package tokenizer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct {
		json string
		want Config
		err  string
	}{
		"strings":     {`{"chat_template": "T", "bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "X", "add_bos_token": true}`, Config{ChatTemplate: "T", BOS: "<s>", EOS: "</s>", Class: "X", AddBOS: true}, ""},
		"added token": {`{"bos_token": {"__type": "AddedToken", "content": "<b>"}, "eos_token": null}`, Config{BOS: "<b>"}, ""},
		"named":       {`{"chat_template": [{"name": "tool_use", "template": "U"}, {"name": "default", "template": "D"}]}`, Config{ChatTemplate: "D"}, ""},
		"no default":  {`{"chat_template": [{"name": "tool_use", "template": "U"}]}`, Config{}, "default"},
		"bad token":   {`{"eos_token": 3}`, Config{}, "eos_token"},
		"bad json":    {`{`, Config{}, "config"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name+".json")
			os.WriteFile(p, []byte(c.json), 0o644)
			got, err := LoadConfig(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), p) {
					t.Errorf("%s: err %v", name, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("%s: %+v, %v", name, got, err)
			}
		})
	}
	sub := filepath.Join(dir, "model")
	os.Mkdir(sub, 0o755)
	os.WriteFile(filepath.Join(sub, ConfigFile), []byte(`{"eos_token": "<e>"}`), 0o644)
	if c, err := LoadConfig(sub); err != nil || c.EOS != "<e>" {
		t.Errorf("directory: %+v %v", c, err)
	}
}

// TestLoadDirectoryAndCharLevel loads a small SentencePiece-style file
// (Replace normalizer, no pre-tokenizer, byte fallback, Gemma's decoder)
// from a directory.
func TestLoadDirectoryAndCharLevel(t *testing.T) {
	var vocab strings.Builder
	vocab.WriteString(`"<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4, "ab": 5`)
	for b := 0; b < 256; b++ {
		vocab.WriteString(`, "<0x` + strings.ToUpper(string("0123456789abcdef"[b>>4])+string("0123456789abcdef"[b&15])) + `>": ` + strconv.Itoa(6+b))
	}
	js := `{"added_tokens": [{"id": 262, "content": "<eot>", "special": true}],
	"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
	"pre_tokenizer": null,
	"decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]},
	"model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true, "vocab": {` + vocab.String() + `}, "merges": [["▁", "a"], ["a", "b"]]}}`
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, File), []byte(js), 0o644)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.EncodeWithSpecials("ab a€<eot>")
	// "ab" "▁a" then € as its three UTF-8 bytes' <0xHH> tokens, then <eot>
	want := []int{5, 4, 6 + 0xE2, 6 + 0x82, 6 + 0xAC, 262}
	if len(ids) != len(want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	for i := range ids {
		if ids[i] != want[i] {
			t.Fatalf("ids %v, want %v", ids, want)
		}
	}
	if got := tok.Decode(ids); got != "ab a€<eot>" {
		t.Errorf("decode %q", got)
	}
	if err := tok.Save(filepath.Join(dir, "out.json")); err == nil {
		t.Error("Save wrote a character-level tokenizer")
	}
}
