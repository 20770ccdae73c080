package remote

import "testing"

func TestEndpointKey(t *testing.T) {
	a := Endpoint{Kind: KindVLLM, URL: "http://h:1", Model: "m", Options: map[string]string{"logprobs": "processed_logprobs", "x": "1"}}
	b := Endpoint{Kind: KindVLLM, URL: "http://h:1", Model: "m", Options: map[string]string{"x": "1", "logprobs": "processed_logprobs"}}
	if a.Key() != b.Key() {
		t.Fatalf("equal endpoints, keys %+v %+v", a.Key(), b.Key())
	}
	for _, c := range []Endpoint{{Kind: KindVLLM, URL: "http://h:1", Model: "m2", Options: a.Options}, {Kind: KindVLLM, URL: "http://h:1", Model: "m", Seed: SeedNone, Options: a.Options},
		{Kind: KindVLLM, URL: "http://h:1", Model: "m", Options: map[string]string{"logprobs": "raw_logprobs", "x": "1"}}, {Kind: KindVLLM, URL: "http://h:1", Model: "m", MaxConcurrent: 3, Options: a.Options}} {
		if c.Key() == a.Key() {
			t.Errorf("%+v and %+v share a key", c, a)
		}
	}
}
