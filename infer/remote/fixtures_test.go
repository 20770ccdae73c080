package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/infer"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replay serves body at path after checking the request with check.
func replay(t *testing.T, path string, body []byte, check func(map[string]any)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path || r.Method != http.MethodPost {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		var got map[string]any
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if check != nil {
			check(got)
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func wantField(t *testing.T, got map[string]any, key string, want any) {
	t.Helper()
	g, _ := json.Marshal(got[key])
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("request field %s = %s, want %s", key, g, w)
	}
}

func checkCompletion(t *testing.T, c infer.Completion, ids []int, lps []float64, reason string) {
	t.Helper()
	if !equalInts(c.Tokens, ids) || c.FinishReason != reason || len(c.Logprobs) != len(lps) {
		t.Fatalf("completion %v %v %q, want %v %v %q", c.Tokens, c.Logprobs, c.FinishReason, ids, lps, reason)
	}
	for i := range lps {
		if math.Abs(c.Logprobs[i]-lps[i]) > 1e-12 {
			t.Fatalf("log-prob %d = %v, want %v", i, c.Logprobs[i], lps[i])
		}
	}
}

// recordedCase is one recorded engine exchange: its fixture files (the
// answer NAME.json and the body the client must send, NAME.request.json),
// the request, the engine's settings, and the completion it must decode to.
type recordedCase struct {
	name     string
	req      infer.Request
	endpoint Endpoint
	ids      []int
	lps      []float64
	reason   string
}

var qwenPrompt = []int{785, 6722, 315, 9625, 374}

// wantRecordedRequest checks that the body sent is exactly the recorded
// one: every field present with its value, and no other field.
func wantRecordedRequest(t *testing.T, got map[string]any, name string) {
	t.Helper()
	var want map[string]any
	if err := json.Unmarshal(readFixture(t, name+".request.json"), &want); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		wantField(t, got, k, v)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("request field %s not in %s.request.json", k, name)
		}
	}
}

func TestVLLMRecorded(t *testing.T) {
	for _, tc := range []recordedCase{
		{"vllm_completion_stop", infer.Request{Prompt: qwenPrompt, MaxTokens: 16, Temperature: 1, Stop: []int{151645}, Seed: 77},
			Endpoint{Kind: KindVLLM}, []int{12095, 13, 151645}, []float64{-0.3125, -1.203125, -0.0078125}, infer.FinishStop},
		{"vllm_completion_length", infer.Request{Prompt: qwenPrompt, MaxTokens: 2, Temperature: 0.7, TopP: 0.9, Stop: []int{151645}, Seed: 77},
			Endpoint{Kind: KindVLLM, Options: map[string]string{OptLogprobs: LogprobsProcessed}}, []int{576, 6722}, []float64{-2.5, -0.75}, infer.FinishLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := replay(t, "/v1/completions", readFixture(t, tc.name+".json"), func(got map[string]any) {
				wantRecordedRequest(t, got, tc.name)
			})
			e := tc.endpoint
			e.URL, e.Model = srv.URL, "Qwen/Qwen3-0.6B"
			v, err := e.Engine(nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := v.Sample(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			checkCompletion(t, c, tc.ids, tc.lps, tc.reason)
		})
	}
}

// Variations of the recorded vLLM answer that break the contract.
func TestVLLMMalformed(t *testing.T) {
	base := string(readFixture(t, "vllm_completion_stop.json"))
	for name, body := range map[string]string{
		"ids disagree":     strings.Replace(base, `"token_ids":[12095,13,151645]`, `"token_ids":[12095,14,151645]`, 1),
		"text tokens":      strings.Replace(base, `"token_id:13"`, `"."`, 1),
		"null logprob":     strings.Replace(base, `-1.203125,`, `null,`, 1),
		"short logprobs":   strings.Replace(base, `[-0.3125,-1.203125,-0.0078125]`, `[-0.3125,-1.203125]`, 1),
		"no logprobs":      strings.Replace(base, `"logprobs":{"text_offset"`, `"logprobs":null,"x":{"text_offset"`, 1),
		"positive logprob": strings.Replace(base, `-1.203125,`, `0.5,`, 1),
		"abort":            strings.Replace(base, `"finish_reason":"stop"`, `"finish_reason":"abort"`, 1),
		"two choices":      strings.Replace(base, `"choices":[{`, `"choices":[{"index":1},{`, 1),
		"truncated":        base[:len(base)/2],
		"over max tokens":  strings.Replace(base, `"finish_reason":"stop"`, `"finish_reason":"length"`, 1),
		"empty completion": `{"choices":[{"index":0,"text":"","logprobs":{"tokens":[],"token_logprobs":[]},"finish_reason":"length","token_ids":[]}]}`,
		"not json":         `<html>bad gateway</html>`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := replay(t, "/v1/completions", []byte(body), nil)
			max := 16
			if name == "over max tokens" {
				max = 2
			}
			c, err := NewVLLM(srv.URL, "m", nil).Sample(context.Background(), infer.Request{Prompt: qwenPrompt, MaxTokens: max, Temperature: 1})
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("%s: got %v, %v; want ErrProtocol", name, c, err)
			}
		})
	}
	// token_ids is optional (older servers): the "token_id:N" tokens suffice.
	srv := replay(t, "/v1/completions", []byte(strings.Replace(base, `"token_ids":[12095,13,151645],`, ``, 1)), nil)
	c, err := NewVLLM(srv.URL, "m", nil).Sample(context.Background(), infer.Request{Prompt: qwenPrompt, MaxTokens: 16, Temperature: 1, Stop: []int{151645}})
	if err != nil {
		t.Fatal(err)
	}
	checkCompletion(t, c, []int{12095, 13, 151645}, []float64{-0.3125, -1.203125, -0.0078125}, infer.FinishStop)
}

func TestSGLangRecorded(t *testing.T) {
	for _, tc := range []recordedCase{
		{"sglang_generate_stop", infer.Request{Prompt: qwenPrompt, MaxTokens: 16, Temperature: 0.5, Stop: []int{151645}, Seed: 5},
			Endpoint{Kind: KindSGLang}, []int{12095, 13, 151645}, []float64{-0.3125, -1.203125, -0.0078125}, infer.FinishStop},
		{"sglang_generate_length", infer.Request{Prompt: qwenPrompt, MaxTokens: 2, Temperature: 1, TopP: 1, Stop: []int{151645}, Seed: 5},
			Endpoint{Kind: KindSGLang, Seed: SeedNone}, []int{576, 6722}, []float64{-2.5, -0.75}, infer.FinishLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := replay(t, "/generate", readFixture(t, tc.name+".json"), func(got map[string]any) {
				wantRecordedRequest(t, got, tc.name)
			})
			e := tc.endpoint
			e.URL = srv.URL
			s, err := e.Engine(nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := s.Sample(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			checkCompletion(t, c, tc.ids, tc.lps, tc.reason)
		})
	}
}

func TestSGLangMalformed(t *testing.T) {
	base := string(readFixture(t, "sglang_generate_stop.json"))
	for name, body := range map[string]string{
		"ids disagree": strings.Replace(base, `"output_ids":[12095,13,151645]`, `"output_ids":[12095,13]`, 1),
		"null logprob": strings.Replace(base, `[-1.203125,13,null]`, `[null,13,null]`, 1),
		"short entry":  strings.Replace(base, `[-1.203125,13,null]`, `[-1.203125]`, 1),
		"string id":    strings.Replace(base, `[-1.203125,13,null]`, `[-1.203125,"13",null]`, 1),
		"no meta":      `{"text":"x","output_ids":[1]}`,
		"abort":        strings.Replace(base, `{"type":"stop","matched":151645}`, `{"type":"abort","message":"x"}`, 1),
		"no finish":    strings.Replace(base, `"finish_reason":{"type":"stop","matched":151645},`, ``, 1),
		"truncated":    base[:len(base)-20],
		"nan logprob":  strings.Replace(base, `-1.203125,13`, `"NaN",13`, 1),
		"no tokens":    `{"text":"","meta_info":{"finish_reason":{"type":"length","length":0},"output_token_logprobs":[]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := replay(t, "/generate", []byte(body), nil)
			c, err := NewSGLang(srv.URL, nil).Sample(context.Background(), infer.Request{Prompt: qwenPrompt, MaxTokens: 16, Temperature: 1})
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("%s: got %v, %v; want ErrProtocol", name, c, err)
			}
		})
	}
}

// The recorded llama-server streams replayed: the request the client sends
// must be the recorded one, and the completion its tokens and log-probs.
func TestLlamaCppRecorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  infer.Request
		post bool
	}{
		{"llamacpp_stream_t07_p09", infer.Request{Prompt: []int{1, 2, 3, 4, 5}, MaxTokens: 6, Temperature: 0.7, TopP: 0.9, Seed: 42}, true},
		{"llamacpp_stream_greedy", infer.Request{Prompt: []int{1, 2, 3, 4, 5}, MaxTokens: 6, Temperature: 0, TopP: 0.9, Seed: 42}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := readFixture(t, tc.name+".sse")
			var wantReq map[string]any
			if err := json.Unmarshal(readFixture(t, tc.name+".request.json"), &wantReq); err != nil {
				t.Fatal(err)
			}
			srv := replay(t, "/v1/completions", stream, func(got map[string]any) {
				for k, v := range wantReq {
					wantField(t, got, k, v)
				}
				if len(got) != len(wantReq) {
					t.Errorf("request has %d fields, recorded %d", len(got), len(wantReq))
				}
			})
			c, err := NewLlamaCpp(srv.URL, nil).Sample(context.Background(), tc.req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			ids, lps := parseRecordedStream(t, stream, tc.post)
			checkCompletion(t, c, ids, lps, infer.FinishLength)

			// Stopping at the third token's id cuts the replayed stream there.
			req := tc.req
			req.Stop = []int{ids[2]}
			c, err = NewLlamaCpp(srv.URL, nil).Sample(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			n := 3
			for i, id := range ids[:3] {
				if id == ids[2] {
					n = i + 1
					break
				}
			}
			checkCompletion(t, c, ids[:n], lps[:n], infer.FinishStop)
		})
	}
}

// parseRecordedStream reads ids and log-probs out of a recorded stream
// independently of the client's parser.
func parseRecordedStream(t *testing.T, b []byte, post bool) ([]int, []float64) {
	var ids []int
	var lps []float64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Logprobs *struct {
					Content []map[string]any `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].Logprobs == nil {
			continue
		}
		for _, e := range c.Choices[0].Logprobs.Content {
			ids = append(ids, int(e["id"].(float64)))
			if post {
				lps = append(lps, math.Log(e["prob"].(float64)))
			} else {
				lps = append(lps, e["logprob"].(float64))
			}
		}
	}
	if len(ids) == 0 {
		t.Fatal("recorded stream has no tokens")
	}
	return ids, lps
}
