package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBody bounds what is read of one answer (a guard against a runaway
// server, far above any real completion).
const maxBody = 64 << 20

type headerKey struct{}

// WithHeader returns a context whose engine requests carry the header
// name: value (for example the SGLang router's X-SMG-Routing-Key, which
// keeps one episode's calls on one engine).
func WithHeader(ctx context.Context, name, value string) context.Context {
	h := http.Header{}
	if prev, ok := ctx.Value(headerKey{}).(http.Header); ok {
		h = prev.Clone()
	}
	h.Set(name, value)
	return context.WithValue(ctx, headerKey{}, h)
}

// Headers returns the headers WithHeader put in ctx (nil if none).
func Headers(ctx context.Context) http.Header {
	h, _ := ctx.Value(headerKey{}).(http.Header)
	return h
}

// newPost builds a JSON POST request, with the headers WithHeader put in ctx.
func newPost(ctx context.Context, url string, body any) (*http.Request, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode request for %s: %w", url, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", url, err)
	}
	for k, v := range Headers(ctx) {
		req.Header[k] = append([]string(nil), v...)
	}
	req.Header.Set("Content-Type", "application/json")
	// A sampling request with a fixed seed may be sent again: the nil
	// X-Idempotency-Key (never written on the wire) lets net/http replay it
	// when the server closed a kept-alive connection just as it was reused
	// (cpp-httplib closes after a few requests per connection).
	req.Header["X-Idempotency-Key"] = nil
	return req, nil
}

// do sends req and returns the response when its status is 2xx; otherwise
// it reads the start of the body and returns a *StatusError.
func do(client *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", req.URL, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		se := &StatusError{
			URL:        req.URL.String(),
			Code:       resp.StatusCode,
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After")),
			Body:       strings.TrimSpace(string(b)),
		}
		se.classify()
		return nil, se
	}
	return resp, nil
}

// postJSON posts body to url and decodes a 2xx JSON answer into out.
func postJSON(ctx context.Context, client *http.Client, url string, body, out any) error {
	req, err := newPost(ctx, url, body)
	if err != nil {
		return err
	}
	resp, err := do(client, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("read answer of %s: %w", url, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: decode answer of %s: %v", ErrProtocol, url, err)
	}
	return nil
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
func parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func httpClient(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256 // many episodes share one server
	return &http.Client{Transport: t}
}

func trimURL(u string) string { return strings.TrimRight(u, "/") }
