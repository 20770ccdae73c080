package remote

import (
	"errors"
	"fmt"
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

// StatusError is a non-2xx HTTP answer.
type StatusError struct {
	URL        string
	Code       int
	RetryAfter time.Duration // from a Retry-After header, 0 if none
	Body       string        // the start of the body, for the message
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.URL, e.Code, e.Body)
}

// Temporary reports whether the status is worth retrying: 408, 429 and
// every 5xx.
func (e *StatusError) Temporary() bool {
	return e.Code == 408 || e.Code == 429 || e.Code >= 500
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
