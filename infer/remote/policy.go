package remote

import (
	"fmt"
	"net/http"
)

// vLLM's --logprobs-mode values that matter here: the values of its
// option OptLogprobs.
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
//   - vLLM: with OptLogprobs LogprobsProcessed always; with raw log-probs (vLLM's
//     default) only at temperature 1 without a nucleus, where raw and
//     processed agree (top-k and penalties are always sent neutral).
//   - SGLang: log softmax(z/T), before its top-p filter: any temperature,
//     but no nucleus. No server flag changes this.
//
// Each engine kind says this itself (SamplingChecker); a kind whose
// engine is none, or no registered kind, accepts every setting here.
func CheckSampling(e Endpoint, temperature, topP float64) error {
	k, ok := LookupKind(e.Kind)
	if !ok {
		return nil
	}
	if c, ok := k.New(e, http.DefaultClient).(SamplingChecker); ok {
		return c.CheckSampling(temperature, topP)
	}
	return nil
}

// nucleus reports whether topP restricts sampling to a nucleus.
func nucleus(topP float64) bool { return topP > 0 && topP < 1 }

// CheckSampling implements SamplingChecker: raw log-probs (the default)
// are q's only at temperature 1 without a nucleus.
func (v *VLLM) CheckSampling(temperature, topP float64) error {
	if temperature == 0 || v.LogprobsMode == LogprobsProcessed || (temperature == 1 && !nucleus(topP)) {
		return nil
	}
	return fmt.Errorf("vLLM at %s reports raw log-probs (its default --logprobs-mode %s, computed before temperature and top-p), "+
		"not those of the distribution it samples from at temperature %v, top_p %v: start vLLM with --logprobs-mode %s "+
		"and tell compactrl with --%s %s (serve: engine.%s), or sample at temperature 1, top_p 1",
		v.url, LogprobsRaw, temperature, topP, LogprobsProcessed, vllmLogprobs.Flag(), LogprobsProcessed, vllmLogprobs.Field)
}

// CheckSampling implements SamplingChecker: any temperature, no nucleus.
func (s *SGLang) CheckSampling(temperature, topP float64) error {
	if temperature == 0 || !nucleus(topP) {
		return nil
	}
	return fmt.Errorf("SGLang at %s reports log softmax(z/T) before its top-p filter, not the log-probs of the nucleus it samples from "+
		"at top_p %v, and has no flag that changes this: use top_p 1 with SGLang (or vLLM with --logprobs-mode %s, or llama.cpp)",
		s.url, topP, LogprobsProcessed)
}
