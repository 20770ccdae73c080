package remote

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnavailable is matched (errors.Is) by the error a Pool returns when
// every attempt at a request failed: the endpoints are down, overloaded or
// answering garbage. The agent loop marks such an episode infra_error.
var ErrUnavailable = errors.New("inference endpoints unavailable")

// ErrProtocol marks an answer that does not parse or breaks the
// token/log-prob contract (malformed JSON, truncated stream, a log-prob
// list of the wrong length, a non-finite log-prob, an empty completion).
// It is retried: a restarted or overloaded server can send such answers.
var ErrProtocol = errors.New("malformed inference response")

// ErrInvalidRequest marks a Request that no endpoint could serve (for
// example MaxTokens ≤ 0 or an empty prompt). It is not retried.
var ErrInvalidRequest = errors.New("invalid inference request")

// UnavailableError is what Pool.Sample returns after its last failed
// attempt. errors.Is(err, ErrUnavailable) holds; Unwrap gives the last
// attempt's error.
type UnavailableError struct {
	Attempts int
	Last     error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v after %d attempts: %v", ErrUnavailable, e.Attempts, e.Last)
}

// Is reports target == ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *UnavailableError) Unwrap() error { return e.Last }

// ErrRejected is matched (errors.Is) by an engine answer that says the
// request can never succeed: an unknown field, a prompt longer than the
// engine's context, any other 4xx but 408 and 429. It is not retried, and
// its message says what to change.
var ErrRejected = errors.New("engine rejected the request")

// StatusError is a non-2xx HTTP answer.
type StatusError struct {
	URL        string
	Code       int
	RetryAfter time.Duration // from a Retry-After header, 0 if none
	Body       string        // the start of the body, for the message
	// Permanent marks a 5xx that will fail again however often it is sent
	// (see classify); Hint says what fixes it.
	Permanent bool
	Hint      string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d: %s", e.URL, e.Code, e.Body)
	if !e.Temporary() {
		msg = fmt.Sprintf("%v (permanent, not retried): %s", ErrRejected, msg)
	}
	if e.Hint != "" {
		msg += " — " + e.Hint
	}
	return msg
}

// Temporary reports whether the status is worth retrying: 408, 429 and
// every 5xx not marked Permanent.
func (e *StatusError) Temporary() bool {
	return !e.Permanent && (e.Code == 408 || e.Code == 429 || e.Code >= 500)
}

// Is reports target == ErrRejected for a permanent answer.
func (e *StatusError) Is(target error) bool { return target == ErrRejected && !e.Temporary() }

// classify marks answers whose body says the request itself is at fault,
// whatever the status (servers differ on 400 or 500), and gives the hint
// that fixes them.
func (e *StatusError) classify() {
	b := strings.ToLower(e.Body)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(b, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("context length", "context size", "context window", "maximum model length", "max_model_len"):
		e.Permanent = true
		e.Hint = "context overflow: the prompt (plus max tokens) exceeds the engine's context; lower the agent's context budget or raise the engine's context length"
	case has("unexpected keyword argument", "extra inputs are not permitted", "extra_forbidden", "unknown field"):
		e.Permanent = true
		e.Hint = "the engine does not know a field compactrl sends (an older version?): upgrade the engine"
	}
}

// retryable classifies one attempt's error. Permanent: an invalid request
// and 4xx answers other than 408/429 (the request itself is wrong, another
// endpoint of the same model would refuse it too). Everything else —
// connection errors, timeouts, 5xx, 429, malformed answers — is retried.
func retryable(err error) bool {
	if errors.Is(err, ErrInvalidRequest) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Temporary()
	}
	return true
}

// retryAfter returns the server's Retry-After hint in err, or 0.
func retryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
