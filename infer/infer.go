// Package infer is the boundary between the agent loop and whatever produces
// tokens: the built-in engine, an OpenAI-compatible HTTP server (llama.cpp,
// vLLM, SGLang) or a scripted policy. Everything is token-in / token-out so
// that the trainer sees exactly the ids that were sampled, with the sampler's
// log-probabilities (π_old), never a re-tokenisation of text.
package infer

import "context"

// Request asks for one continuation of Prompt.
type Request struct {
	Prompt      []int   // the whole context, as token ids
	MaxTokens   int     // upper bound on len(Completion.Tokens)
	Temperature float64 // 0 means greedy
	TopP        float64 // 0 or 1 means no nucleus truncation
	Stop        []int   // token ids that end the completion (the stop token is included in Tokens)
	Seed        int64   // per-request seed; same seed, same prompt, same model → same tokens
}

// Finish reasons.
const (
	FinishStop   = "stop"   // a stop token was sampled
	FinishLength = "length" // MaxTokens reached
)

// Completion is what a Sampler returns for one Request.
type Completion struct {
	Tokens       []int     // sampled token ids
	Logprobs     []float64 // log π(token) under the sampling policy, aligned with Tokens
	FinishReason string    // FinishStop or FinishLength
}

// Sampler produces completions. Implementations must be safe for concurrent
// use: the rollout workers call Sample from many goroutines, and engines
// that batch gather concurrent calls into one batch.
type Sampler interface {
	Sample(ctx context.Context, req Request) (Completion, error)
}
