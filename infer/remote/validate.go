package remote

import (
	"fmt"
	"math"

	"github.com/compactrl/compactrl/infer"
)

// checkRequest rejects requests no engine can serve; vocab > 0 bounds the
// prompt's ids.
func checkRequest(req infer.Request, vocab int) error {
	switch {
	case len(req.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	case req.MaxTokens <= 0:
		return fmt.Errorf("%w: MaxTokens %d ≤ 0", ErrInvalidRequest, req.MaxTokens)
	case req.Temperature < 0 || math.IsNaN(req.Temperature):
		return fmt.Errorf("%w: Temperature %v", ErrInvalidRequest, req.Temperature)
	case req.TopP < 0 || req.TopP > 1 || math.IsNaN(req.TopP):
		return fmt.Errorf("%w: TopP %v outside [0, 1]", ErrInvalidRequest, req.TopP)
	}
	for i, id := range req.Prompt {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return fmt.Errorf("%w: prompt token %d is %d, %s", ErrInvalidRequest, i, id, vocabRange(vocab))
		}
	}
	return nil
}

// topP maps the Request convention (0 or 1: no nucleus) to the servers'.
func topP(req infer.Request) float64 {
	if req.TopP <= 0 || req.TopP > 1 {
		return 1
	}
	return req.TopP
}

// finish turns the server's raw answer into a Completion that keeps the
// contract, or explains why it cannot. It truncates at the first stop id
// (the stop token included), and requires: one finite log-prob ≤ 0 per
// token, ids in [0, vocab) (vocab ≤ 0: only non-negative), at least one
// token, at most MaxTokens, and a
// "stop" finish to end on a stop id or be the server's own end-of-generation
// token ("stop" with a last token outside req.Stop is kept: the server
// stopped on its EOS, which it returned as the last token).
func finish(req infer.Request, tokens []int, logprobs []float64, reason string, vocab int) (infer.Completion, error) {
	if len(tokens) != len(logprobs) {
		return infer.Completion{}, fmt.Errorf("%w: %d tokens but %d log-probs", ErrProtocol, len(tokens), len(logprobs))
	}
	stop := make(map[int]bool, len(req.Stop))
	for _, s := range req.Stop {
		stop[s] = true
	}
	for i, id := range tokens {
		if stop[id] {
			tokens, logprobs, reason = tokens[:i+1], logprobs[:i+1], infer.FinishStop
			break
		}
	}
	if len(tokens) == 0 {
		return infer.Completion{}, fmt.Errorf("%w: empty completion (finish %q)", ErrProtocol, reason)
	}
	if len(tokens) > req.MaxTokens {
		return infer.Completion{}, fmt.Errorf("%w: %d tokens for MaxTokens %d", ErrProtocol, len(tokens), req.MaxTokens)
	}
	for i, id := range tokens {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return infer.Completion{}, fmt.Errorf("%w: token %d has id %d, %s", ErrProtocol, i, id, vocabRange(vocab))
		}
		lp := logprobs[i]
		// A log-probability above 0 beyond float32 rounding is not one.
		if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 1e-4 {
			return infer.Completion{}, fmt.Errorf("%w: token %d (id %d) has log-prob %v", ErrProtocol, i, id, lp)
		}
		if lp > 0 {
			logprobs[i] = 0
		}
	}
	switch reason {
	case infer.FinishStop, infer.FinishLength:
	default:
		return infer.Completion{}, fmt.Errorf("%w: finish reason %q", ErrProtocol, reason)
	}
	return infer.Completion{Tokens: tokens, Logprobs: logprobs, FinishReason: reason}, nil
}

// vocabRange says which ids are valid, for errors.
func vocabRange(vocab int) string {
	if vocab <= 0 {
		return "a negative id"
	}
	return fmt.Sprintf("outside the vocabulary [0, %d)", vocab)
}
