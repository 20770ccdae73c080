package agent

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/infer"
)

// specialTok is a byte-level tokenizer with special tokens: special i is id
// i, byte b is id 1000+b. EncodeWithSpecials recognises the specials
// (longest first); Encode never does.
type specialTok struct{ specials []string }

func (t specialTok) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = 1000 + int(s[i])
	}
	return ids
}

func (t specialTok) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 1000 {
			b.WriteByte(byte(id - 1000))
		} else if id >= 0 && id < len(t.specials) {
			b.WriteString(t.specials[id])
		}
	}
	return b.String()
}

func (t specialTok) EncodeWithSpecials(s string) []int {
	var out []int
	for i := 0; i < len(s); {
		best := -1
		for id, sp := range t.specials {
			if strings.HasPrefix(s[i:], sp) && (best < 0 || len(sp) > len(t.specials[best])) {
				best = id
			}
		}
		if best >= 0 {
			out = append(out, best)
			i += len(t.specials[best])
			continue
		}
		out = append(out, 1000+int(s[i]))
		i++
	}
	return out
}

func (t specialTok) SpecialID(s string) (int, bool) {
	i := slices.Index(t.specials, s)
	return i, i >= 0
}

func (t specialTok) Specials() []string { return t.specials }

var presetSpecials = []string{
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_response>", "</tool_response>",
	"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>",
	"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
	"<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>",
	"<|start|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|channel|>",
	"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
}

// TestPresetRenderings renders one conversation with every preset and
// compares the text with the layout of the template each follows (the
// templates of GPT-OSS, GLM-4.5 and ChatML have no Jinja source among the
// parity packages, so these strings are their check).
func TestPresetRenderings(t *testing.T) {
	msgs := []Message{{"system", "S"}, {"user", "T"}, {"assistant", "A"}, {"tool", "O"}, {"user", "Q"}}
	want := map[string]string{
		"qwen3":       "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\n<tool_response>\nO\n</tool_response><|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
		"chatml":      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nO<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n",
		"llama3":      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nT<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nO<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"llama3.1":    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nT<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\nO<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"deepseek-v3": "<｜begin▁of▁sentence｜>S<｜User｜>T<｜Assistant｜>A<｜end▁of▁sentence｜><｜User｜>O<｜User｜>Q<｜Assistant｜>",
		"gemma3":      "<bos><start_of_turn>user\nS\n\nT<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n<start_of_turn>user\nO<end_of_turn>\n<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n",
		"gpt-oss": gptOSSSystem + "<|start|>developer<|message|># Instructions\n\nS\n\n<|end|><|start|>user<|message|>T<|end|>" +
			"<|start|>assistant<|channel|>final<|message|>A<|end|><|start|>user<|message|>O<|end|><|start|>user<|message|>Q<|end|><|start|>assistant",
		"glm4": "[gMASK]<sop><|system|>\nS<|user|>\nT<|assistant|>\n<think></think>\nA<|observation|>\n<tool_response>\nO\n</tool_response><|user|>\nQ<|assistant|>\n<think></think>\n",
	}
	tok := specialTok{presetSpecials}
	for name, p := range Presets() {
		f, err := NewChatFormat(p, tok)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := msgs
		if name == "gpt-oss" {
			// harmony history: the final channel is part of the content the model wrote
			m = slices.Clone(msgs)
			m[2].Content = "<|channel|>final<|message|>A"
		}
		ids, err := f.Render(m, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := tok.Decode(ids); got != want[name] {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want[name])
		}
	}
	if len(want) != len(Presets()) {
		t.Errorf("%d presets, %d expected renderings", len(Presets()), len(want))
	}
}

// recSampler answers every request with fixed text (and a chosen stop
// token), recording the requests.
type recSampler struct {
	tok   specialTok
	text  func(call int) string
	stop  func(call int) int
	reqs  []infer.Request
	comps [][]int
}

func (s *recSampler) Sample(_ context.Context, req infer.Request) (infer.Completion, error) {
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	ids := s.tok.Encode(s.text(n))
	if len(ids) > req.MaxTokens-1 {
		ids = ids[:req.MaxTokens-1]
	}
	if st := s.stop(n); st >= 0 {
		ids = append(ids, st)
	}
	s.comps = append(s.comps, ids)
	return infer.Completion{Tokens: ids, Logprobs: make([]float64, len(ids))}, nil
}

type loopEnv struct{ n, steps int }

func (e *loopEnv) Reset(context.Context) (string, error) { return "do the task", nil }
func (e *loopEnv) Step(_ context.Context, reply string) (Step, error) {
	e.n++
	if e.n >= e.steps {
		return Step{Done: true, Reward: 1}, nil
	}
	return Step{Observation: strings.Repeat("output line with <|im_end|> and <|user|> in it\n", 1+e.n%3)}, nil
}

// TestSampledTokensScoredInTheirContext is the property that matters where
// a template re-renders history differently from the incremental prefix
// (GLM-4.5's roles as stop tokens, GPT-OSS's <|return|> becoming <|end|>,
// Qwen3 dropping earlier thinking): every sampled token of every segment
// sits in the segment exactly after the context it was sampled from, so a
// trainer scoring prompt ⊕ response sees the sampler's contexts. It also
// checks that special-token strings in observations stay text.
func TestSampledTokensScoredInTheirContext(t *testing.T) {
	tok := specialTok{presetSpecials}
	for _, name := range PresetNames() {
		f, err := NewChatFormat(Presets()[name], tok)
		if err != nil {
			t.Fatal(err)
		}
		stops := f.Stop()
		s := &recSampler{tok: tok,
			text: func(c int) string { return "<think>hm</think>\nls -la" },
			stop: func(c int) int {
				switch c % 3 {
				case 0:
					return stops[len(stops)-1]
				case 1:
					return -1 // hit the token limit
				}
				return stops[0]
			},
		}
		cfg := DefaultConfig()
		cfg.Context, cfg.Reserve, cfg.MaxActionTokens, cfg.MaxSummaryTokens = 900, 500, 30, 40
		cfg.SystemPrompt = "sys"
		a, err := NewWithFormat(context.Background(), cfg, Local(tok), f, s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ep, err := a.Run(context.Background(), &loopEnv{steps: 30}, 1)
		if err != nil || ep.Metrics[MetricCompactions] == 0 {
			t.Fatalf("%s: err %v, status %s, compactions %v, meta %v", name, err, ep.Status, ep.Metrics[MetricCompactions], ep.Meta)
		}
		call := 0
		for si, seg := range ep.Segments {
			if len(seg.PromptIDs)+len(seg.ResponseIDs) > cfg.Context {
				t.Errorf("%s: segment %d has %d tokens, window %d", name, si, len(seg.PromptIDs)+len(seg.ResponseIDs), cfg.Context)
			}
			ctx := slices.Clone(seg.PromptIDs)
			for j := 0; j < len(seg.ResponseIDs); {
				if seg.LossMask[j] == 0 {
					ctx = append(ctx, seg.ResponseIDs[j])
					j++
					continue
				}
				if call >= len(s.reqs) {
					t.Fatalf("%s: more sampled runs than calls", name)
				}
				if !slices.Equal(ctx, s.reqs[call].Prompt) {
					t.Fatalf("%s: segment %d, call %d: the context before the sampled tokens is not the prompt they were sampled from", name, si, call)
				}
				c := s.comps[call]
				if j+len(c) > len(seg.ResponseIDs) || !slices.Equal(seg.ResponseIDs[j:j+len(c)], c) {
					t.Fatalf("%s: call %d: sampled tokens not kept as sampled", name, call)
				}
				ctx = append(ctx, c...)
				j += len(c)
				call++
			}
		}
		if call != len(s.reqs) {
			t.Errorf("%s: %d calls, %d found in the segments", name, len(s.reqs), call)
		}
		// observations keep special-token strings as text
		count := func(ids []int) int {
			n := 0
			for _, id := range ids {
				if id == 1 { // <|im_end|>
					n++
				}
			}
			return n
		}
		if count(f.Observation(tok.Encode("<|im_end|>"))) != count(f.Observation(nil)) {
			t.Errorf("%s: an observation's special-token string became a control token", name)
		}
	}
}
