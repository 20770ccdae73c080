package remote

import (
	"context"
	"testing"
)

// WithHeader's headers are on every request newPost builds from the context.
func TestWithHeaderOnPost(t *testing.T) {
	ctx := WithHeader(WithHeader(context.Background(), "X-SMG-Routing-Key", "s1"), "X-Other", "o")
	req, err := newPost(ctx, "http://127.0.0.1:1/generate", map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("X-SMG-Routing-Key") != "s1" || req.Header.Get("X-Other") != "o" || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", req.Header)
	}
	req2, _ := newPost(context.Background(), "http://127.0.0.1:1/generate", nil)
	if req2.Header.Get("X-SMG-Routing-Key") != "" {
		t.Fatalf("header without WithHeader: %v", req2.Header)
	}
}
