package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/jsref"
	"github.com/compactrl/compactrl/tokenizer"
)

// scripted plays one episode with canned actions, observations and
// summary, keeping beside the agent's token context the conversation a
// chat template would be given: at every policy call it records the prompt
// the agent sent and the messages that prompt should be the rendering of.
type scripted struct {
	tok     *tokenizer.Tokenizer
	f       *agent.ChatFormat
	cfg     agent.Config
	task    string
	steps   int // Done after this many actions
	msgs    []jsref.Message
	kept    [][]jsref.Message // each step's (assistant, observation) messages
	prompts [][]int
	chats   []jsref.Chat
	summary int
	stepN   int
}

func (s *scripted) head() []jsref.Message {
	var m []jsref.Message
	if sys := s.f.Content(s.cfg.SystemPrompt); sys != "" {
		m = append(m, jsref.Message{Role: "system", Content: sys})
	}
	return m
}

func (s *scripted) record(prompt []int, msgs []jsref.Message) {
	s.prompts = append(s.prompts, slices.Clone(prompt))
	s.chats = append(s.chats, jsref.Chat{Messages: slices.Clone(msgs), AddGenerationPrompt: true})
}

var actions = []string{
	"ls -la /app",
	"cat README.md | head -n 20",
	"grep -rn \"TODO\" src/ && echo done",
	"python3 -c 'print(sum(range(10)))'",
	"echo 日本語 🎉 > out.txt; cat out.txt",
	"sed -i 's/foo/bar/g' main.go && go build ./...",
	"submit",
}

func observation(i int) string {
	obs := []string{
		"total 12\ndrwxr-xr-x 2 root root 4096 Jan  1 00:00 .\n-rw-r--r-- 1 root root  220 Jan  1 00:00 README.md\n",
		"# Project\n\nThis   project   does things.\n\tIndented with a tab.\n\n\n",
		"src/a.go:12: // TODO: fix the end-of-turn handling.\nsrc/b.go:3: // TODO(x): ß é e\u0301\ndone\n",
		"45\n",
		"日本語 🎉\n",
		"  main.go:4:2: undefined: bar\n    exit status 1   \n",
	}
	return fmt.Sprintf("[step %d]\n%s", i, obs[i%len(obs)])
}

const summaryText = "Goal: fix the build. Done: listed /app, read README, grep TODO. Facts: main.go fails (undefined: bar). Next: define bar."

func (s *scripted) Sample(_ context.Context, req infer.Request) (infer.Completion, error) {
	stop := s.f.Stop()[0]
	var text string
	if req.MaxTokens == s.cfg.MaxSummaryTokens {
		q := append(slices.Clone(s.msgs), jsref.Message{Role: "user", Content: s.f.Content(s.cfg.SummaryInstruction)})
		s.record(req.Prompt, q)
		text = summaryText
		s.summary++
		// the next segment: system, resume(S), the last k steps
		s.msgs = append(s.head(), jsref.Message{Role: "user", Content: s.f.Content(s.cfg.ResumeText) + s.f.Preset().ResumeJoin + text})
		k := min(s.cfg.KeepLast, len(s.kept))
		for _, st := range s.kept[len(s.kept)-k:] {
			s.msgs = append(s.msgs, st...)
		}
	} else {
		s.record(req.Prompt, s.msgs)
		text = actions[s.stepN%len(actions)]
	}
	ids := append(s.tok.Encode(text), stop)
	return infer.Completion{Tokens: ids, Logprobs: make([]float64, len(ids))}, nil
}

func (s *scripted) Reset(context.Context) (string, error) {
	s.msgs = append(s.head(), jsref.Message{Role: "user", Content: s.f.Content(s.task)})
	return s.task, nil
}

func (s *scripted) Step(_ context.Context, reply string) (agent.Step, error) {
	s.stepN++
	if s.stepN >= s.steps {
		return agent.Step{Done: true, Reward: 1}, nil
	}
	obs := observation(s.stepN)
	st := []jsref.Message{{Role: "assistant", Content: reply}, {Role: s.f.Preset().ObservationRole, Content: s.f.Content(obs)}}
	s.msgs = append(s.msgs, st...)
	s.kept = append(s.kept, st)
	return agent.Step{Observation: obs}, nil
}

// jinjaSource returns the template the reference renders: the model's own,
// except Gemma 3's without its user/assistant alternation check, which
// refuses the agent's observation (a user turn) followed by the summary
// request (a user turn).
func jinjaSource(t *testing.T, model, src string) string {
	if model != "gemma3" {
		return ""
	}
	check := `{{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}`
	if !strings.Contains(src, check) {
		t.Fatal("gemma3 template: alternation check not found")
	}
	return strings.Replace(src, check, "", 1)
}

// TestChatTemplateParityWithJinja plays multi-turn episodes, with and
// without compactions and system prompt, through the agent loop with each
// model's ChatFormat (preset picked from its tokenizer_config.json), and
// checks that the context at every policy call is token for token the
// model's own chat_template (rendered by @huggingface/jinja, with the
// generation prompt) encoded by the reference tokenizer.
func TestChatTemplateParityWithJinja(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the parity run is in the full test run")
	}
	jsref.Available(t)
	for _, model := range []string{"qwen3", "llama3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(model, func(t *testing.T) {
			dir := jsref.Dir(t, model)
			tok, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			tc, err := tokenizer.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			preset, err := agent.DetectPreset(tc.ChatTemplate, tc.EOS, func(s string) bool { _, ok := tok.SpecialID(s); return ok })
			if err != nil {
				t.Fatal(err)
			}
			f, err := agent.NewChatFormat(preset, tok)
			if err != nil {
				t.Fatal(err)
			}
			src := jinjaSource(t, model, tc.ChatTemplate)
			var all []*scripted
			for _, sc := range []struct {
				name   string
				system string
				noComp bool
			}{
				{"compaction", "You are an agent in a Linux shell. Reply with one command.", false},
				{"compaction, no system prompt", "", false},
				{"no compaction", "  You are an agent.\nBe brief.  ", true},
			} {
				cfg := agent.DefaultConfig()
				cfg.Context, cfg.Reserve, cfg.MaxActionTokens, cfg.MaxSummaryTokens = 900, 330, 40, 80
				cfg.SystemPrompt, cfg.NoCompaction = sc.system, sc.noComp
				if sc.noComp {
					cfg.Context = 4000
				}
				s := &scripted{tok: tok, f: f, cfg: cfg, task: "Fix the build of the Go project in /app.\nThe test `go build ./...` must pass.", steps: 22}
				a, err := agent.NewWithFormat(context.Background(), cfg, agent.Local(tok), f, s)
				if err != nil {
					t.Fatal(err)
				}
				ep, err := a.Run(context.Background(), s, 1)
				if err != nil || ep.Status != episode.StatusOK {
					t.Fatalf("%s: status %s, err %v, meta %v", sc.name, ep.Status, err, ep.Meta)
				}
				if !sc.noComp && s.summary == 0 {
					t.Fatalf("%s: no compaction happened", sc.name)
				}
				for i := range s.chats {
					s.chats[i].Template = src
				}
				all = append(all, s)
			}
			var chats []jsref.Chat
			for _, s := range all {
				chats = append(chats, s.chats...)
			}
			ref := jsref.Run(t, jsref.Request{Dir: dir, Chats: chats})
			n, bad := 0, 0
			for _, s := range all {
				for i, p := range s.prompts {
					want := ref.Chats[n].IDs
					if !slices.Equal(p, want) {
						bad++
						if bad <= 3 {
							k := 0
							for k < len(p) && k < len(want) && p[k] == want[k] {
								k++
							}
							t.Errorf("call %d: first difference at token %d of %d/%d\nagent: %q\njinja: %q", i, k, len(p), len(want),
								tok.Decode(p[max(0, k-8):min(len(p), k+8)]), tok.Decode(want[max(0, k-8):min(len(want), k+8)]))
						}
					}
					var msgs []agent.Message
					for _, m := range s.chats[i].Messages {
						msgs = append(msgs, agent.Message{Role: m.Role, Content: m.Content})
					}
					if r, err := f.Render(msgs, true); err != nil || !slices.Equal(r, want) {
						bad++
						if bad <= 3 {
							t.Errorf("call %d: Render differs from the reference (err %v)", i, err)
						}
					}
					n++
				}
			}
			t.Logf("%s (preset %s): %d policy-call contexts over %d episodes compared (agent loop and Render), %d mismatches", model, preset.Name, n, len(all), bad)
		})
	}
}
