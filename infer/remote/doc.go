// Package remote implements infer.Sampler over HTTP inference servers —
// llama.cpp's llama-server, vLLM and SGLang — and a Pool that spreads
// requests over many such endpoints.
//
// Data flow: the agent loop calls Pool.Sample with a token-id prompt; the
// pool picks the least-loaded healthy endpoint that has a free slot, sends
// one attempt through that endpoint's engine (LlamaCpp, VLLM or SGLang),
// validates the answer (one log-prob per token, finite, ≤ 0, at most
// MaxTokens, a stop finish ends on a stop id) and either returns it or
// retries with exponential backoff on another endpoint. When every attempt
// fails the error is an *UnavailableError (errors.Is(err, ErrUnavailable)),
// which the agent loop turns into an infra_error episode (masked, never
// scored 0). A malformed answer is never returned as a completion.
//
// Every engine is token-in / token-out: the prompt goes as token ids and
// the sampled ids come back as ids, with log π_old(token) for each, so the
// trainer sees exactly what was sampled, never a re-tokenisation of text.
//
// What log-probability each engine records (π_old; docs/design.md,
// "Recorded log-probabilities"): log q(token), q the distribution the
// token was actually drawn from. Every engine is sent every sampling
// parameter that changes q (top-k off, min-p 0, penalties neutral, minimum
// length 0), so no server default (vLLM and SGLang read the model's
// generation_config) changes it. CheckSampling refuses, naming the fix,
// what an engine cannot record that way; the engines refuse it too.
//
//   - llama.cpp: with Temperature > 0 the client asks for
//     post_sampling_probs and returns log p, p the probability of the
//     chosen token in softmax(z/T) restricted to the top-p nucleus and
//     renormalised (the client disables top-k, min-p, typical-p,
//     penalties, DRY and XTC and orders the samplers temperature → top-p,
//     so that is the whole chain). Checked against scoring the sampled
//     tokens in the tests.
//   - vLLM: raw log-probs by default (--logprobs-mode raw_logprobs, before
//     temperature and top-p): accepted only at temperature 1 without a
//     nucleus. A server started with --logprobs-mode processed_logprobs
//     (the endpoint's OptLogprobs) reports the processed distribution and may
//     serve any setting.
//   - SGLang: log softmax(z/T) before its top-p filter: any temperature,
//     no nucleus (the server must not set SGLANG_RETURN_ORIGINAL_LOGPROB).
//   - Greedy (Temperature 0) records log softmax(z) everywhere.
//
// Stop ids. vLLM and SGLang take stop_token_ids and keep the stop token in
// the output ids. llama.cpp's completion API has no stop-token-id option
// and its string stops drop the stop token from the log-prob list (checked
// against build 11669), so the LlamaCpp engine streams the completion and
// closes the stream at the first stop id: the returned tokens are exactly
// the sampled prefix up to and including the stop token. Every engine also
// truncates at the first stop id client-side.
//
// Seeds: vLLM takes the int64 seed as is; SGLang gets it as
// sampling_params.sampling_seed, honoured only by a server running
// --enable-deterministic-inference (SGLang.SeedHonoured asks); llama.cpp's
// seed is a uint32, so the seed is folded (s ⊕ s>>32), 0xFFFFFFFF
// (llama.cpp's "random") mapped to 0xFFFFFFFE. Same seed, prompt and
// llama.cpp server: same tokens, also with other requests in flight on
// other slots (tested). Endpoint.Seed = SeedNone sends no seed.
//
// Errors: an answer that says the request can never succeed (a 4xx other
// than 408/429; a body naming a context overflow or an unknown field; an
// SGLang without sampling_seed) matches ErrRejected, is not retried, and
// says what to change.
//
// Text: Tokenizer wraps llama.cpp's /tokenize and /detokenize, with
// special-token text kept plain (vLLM's /tokenize cannot be told to, so it
// is refused: use a local tokenizer). It is an agent.Tokenizer: every call
// takes the episode's context and returns its own error, which ends that
// episode alone as infra_error.
//
// # Adding an engine kind
//
// Each kind (llamacpp, vllm, sglang) registers itself
// (RegisterKind in its file's init) with its name and constructor; what it
// can do beyond sampling is an optional interface its engine implements:
// SamplingChecker (which sampling settings it can record q for: vLLM,
// SGLang), SeedChecker (whether its server honours seeds: SGLang) and
// TextCodec (the server tokenizes: llama.cpp, for Tokenizer). A setting
// its servers are started with is a KindOption the kind declares (vLLM's
// OptLogprobs); the endpoint carries it in Endpoint.Options. ParseEndpoint,
// Endpoint.Engine, CheckSampling, DialTokenizer, compactrl's --engine-kind
// and option flags and serve's engine fields all read that registry, so
// adding a kind, with its own options, is one engine and one registration
// line (EngineKind shows one with an option), in this package or a new
// one linked into cmd/compactrl with a blank import:
//
//	func init() {
//		remote.RegisterKind(remote.EngineKind{Name: "myengine", New: func(e remote.Endpoint, c *http.Client) infer.Sampler {
//			return NewMyEngine(e.URL, e.Model, c)
//		}})
//	}
//
// Why net/http and not github.com/openai/openai-go: the fields this package
// needs are all outside the OpenAI schema that client types — llama.cpp's
// logprobs.content[] with id/prob, post_sampling_probs and samplers; vLLM's
// choices[].token_ids and "token_id:N" tokens; SGLang's /generate is not an
// OpenAI endpoint at all — so every response would be read through the raw
// JSON escape hatch anyway, and the client's own retry loop would have to
// be disabled because retries here go across endpoints. What remained for
// the library was marshalling six request fields.
package remote
