// Package format reads and writes the on-disk formats of the built-in model:
// Hugging Face safetensors + config.json (LlamaForCausalLM checkpoints, also
// used for optimiser state) and GGUF v3 for llama.cpp.
//
// Data flow: the trainer holds named float32 tensors ([]Tensor, HF names,
// row-major shapes) → WriteSafetensors / WriteConfig produce a checkpoint
// directory that transformers loads; WriteGGUF maps the same tensors to
// llama.cpp names (permuting q/k rows to llama.cpp's RoPE layout), adds the
// tokenizer vocabulary, and writes a file llama-server loads (matrices F32,
// F16 or BF16, rounded as the gguf package's quantize rounds them; BF16 as
// the bf16 path's kernel.BF16 rounds its weights).
package format
