// Package tokenizer is a byte-level BPE tokenizer compatible with Hugging
// Face tokenizer.json files (GPT-2 / Llama-3 style).
//
// Data flow: text → pre-tokenizer (GPT-2 or Llama-3 split rules written by
// hand, no regexp) → words → each word's bytes as byte tokens → BPE merges
// applied by rank (lowest first, leftmost on ties) → token ids. Decoding
// concatenates each token's bytes, so Decode(Encode(s)) == s for every byte
// string, invalid UTF-8 included: all 256 bytes are in the vocabulary.
//
// Vocabulary strings use GPT-2's byte→unicode mapping (printable bytes map to
// themselves, the others to U+0100 onwards), so a saved vocabulary is the
// one transformers and llama.cpp ("gpt2" tokenizer model) expect.
package tokenizer
