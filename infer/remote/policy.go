package remote

import (
	"fmt"
)

// vLLM's --logprobs-mode values that matter here.
const (
	// LogprobsRaw is vLLM's default: log softmax(z) of the model's logits,
	// before temperature, penalties and top-k/top-p.
	LogprobsRaw = "raw_logprobs"
	// LogprobsProcessed is log softmax of the logits after temperature,
	// penalties and the top-k/top-p mask: the distribution vLLM draws from.
	LogprobsProcessed = "processed_logprobs"
)

// Seed modes of an Endpoint.
const (
	SeedRequest = "request" // every request carries its seed (the default)
	SeedNone    = "none"    // no seed is sent
)

func checkLogprobsMode(m string) error {
	switch m {
	case "", LogprobsRaw, LogprobsProcessed:
		return nil
	}
	return fmt.Errorf("logprobs mode %q: want %s or %s", m, LogprobsRaw, LogprobsProcessed)
}

func checkSeedMode(m string) error {
	switch m {
	case "", SeedRequest, SeedNone:
		return nil
	}
	return fmt.Errorf("seed mode %q: want %s or %s", m, SeedRequest, SeedNone)
}

// The neutral values of the distribution-changing sampling parameters that
// compactrl never varies: sent explicitly on every request so that no
// server default (vLLM and SGLang fill missing ones from the model's
// generation_config, e.g. Qwen3's top_k = 20) changes what is sampled.
const (
	neutralTopK              = -1 // vLLM, SGLang: no top-k (llama.cpp: 0)
	neutralMinP              = 0.0
	neutralRepetitionPenalty = 1.0
	neutralPresencePenalty   = 0.0
	neutralFrequencyPenalty  = 0.0
	neutralMinTokens         = 0 // a minimum length masks the stop tokens
)

// CheckSampling reports whether endpoint e records, for requests at
// temperature and topP (0 or 1: no nucleus), what compactrl means by a
// log-probability: log q(token), q the distribution the token was actually
// drawn from (see docs/design.md, "Recorded log-probabilities"). Greedy
// requests (temperature 0) record log softmax(z) on every engine. The
// error names the engine or compactrl setting that fixes the
// configuration; the engines refuse such requests too (ErrInvalidRequest).
//
//   - llama.cpp: always (post_sampling_probs; the client fixes the chain).
//   - vLLM: with LogprobsProcessed always; with raw log-probs (vLLM's
//     default) only at temperature 1 without a nucleus, where raw and
//     processed agree (top-k and penalties are always sent neutral).
//   - SGLang: log softmax(z/T), before its top-p filter: any temperature,
//     but no nucleus. No server flag changes this.
func CheckSampling(e Endpoint, temperature, topP float64) error {
	nucleus := topP > 0 && topP < 1
	if temperature == 0 {
		return nil
	}
	switch e.Kind {
	case KindVLLM:
		if e.LogprobsMode == LogprobsProcessed || (temperature == 1 && !nucleus) {
			return nil
		}
		return fmt.Errorf("vLLM at %s reports raw log-probs (its default --logprobs-mode %s, computed before temperature and top-p), "+
			"not those of the distribution it samples from at temperature %v, top_p %v: start vLLM with --logprobs-mode %s "+
			"and tell compactrl with --engine-logprobs-mode %s (serve: engine.logprobs_mode), or sample at temperature 1, top_p 1",
			e.URL, LogprobsRaw, temperature, topP, LogprobsProcessed, LogprobsProcessed)
	case KindSGLang:
		if !nucleus {
			return nil
		}
		return fmt.Errorf("SGLang at %s reports log softmax(z/T) before its top-p filter, not the log-probs of the nucleus it samples from "+
			"at top_p %v, and has no flag that changes this: use top_p 1 with SGLang (or vLLM with --logprobs-mode %s, or llama.cpp)",
			e.URL, topP, LogprobsProcessed)
	}
	return nil
}
