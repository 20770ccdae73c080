// Package tokenizer is a BPE tokenizer that reads Hugging Face
// tokenizer.json files: its own (trained by Train, written by Save) and real
// models' (Qwen3, Llama 3/3.1, DeepSeek-V3, Gemma 3, GPT-OSS and files
// built from the same parts), token for token equal to the JS reference
// (@lenml/tokenizers, a transformers.js fork; TestParityWithJS).
//
// Data flow of EncodeWithSpecials: text → added tokens split out (longest
// match at each position, lstrip/rstrip) → each other section: normalizer
// (NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip, Sequence) →
// pre-tokenizer steps (Split with a String or Regex pattern and any of the
// five behaviours, ByteLevel, Digits, Metaspace, WhitespaceSplit, Sequence)
// → words → BPE: a byte-level model maps each word's bytes to byte tokens,
// a character-level model (Gemma) its characters to vocabulary ids, unknown
// ones to <0xHH> tokens (byte_fallback) or unk (fuse_unk) after the merges;
// merges apply by rank, lowest first, leftmost on ties, or the whole word
// is taken when it is in the vocabulary (ignore_merges). Encode is the same
// without the added-token split: special-token strings in the text are
// plain text, which is what an agent's observations need.
// Decoding concatenates each token's bytes as the decoder chain (ByteLevel,
// Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence) gives them, so
// Decode(Encode(s)) is the normalized s, invalid UTF-8 included for
// byte-level models.
//
// Regular expressions: the models' Split patterns use lookahead
// (`\s+(?!\S)`), which Go's regexp lacks. The GPT-2, Llama-3, Qwen2 and
// GPT-OSS (o200k) patterns run as hand-written splitters (pretokenize.go,
// checked against the same patterns run by regexp2 with their lookahead,
// by Python's regex and through the JS reference); any other pattern
// (DeepSeek-V3's) runs on github.com/dlclark/regexp2, a backtracking engine
// with lookaround, after jsRegex gives \s, \d and \w the meaning the JS
// reference gives them (ECMAScript \s differs from Unicode
// White_Space at U+0085 and U+FEFF; HF's Rust tokenizers follow the latter,
// so on those two characters this package follows the JS reference).
//
// Why not a library: github.com/sugarme/tokenizer v0.3.0, measured on the
// six files, panics loading Qwen3, Llama 3, DeepSeek-V3 and GPT-OSS (its
// Split compiles the patterns with Go's regexp, which rejects (?!) and
// encodes Gemma 3 at about 400 tokens/s (quadratic BPE on a sentence-piece
// text with no pre-tokenization); tiktoken-go and go-huggingface fetch from
// the network at run time. So the pipeline is written here, on regexp2 and
// golang.org/x/text/unicode/norm.
//
// Vocabulary strings of byte-level models use GPT-2's byte→unicode mapping
// (printable bytes map to themselves, the others to U+0100 onwards), so a
// saved vocabulary is the one transformers and llama.cpp expect.
//
// LoadConfig reads tokenizer_config.json (chat_template, bos/eos tokens);
// the agent package renders conversations with it.
package tokenizer
