package transcript

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
)

// tmpl's markers are ids 0–5; text is bytes at 100+b.
var tmpl = agent.Template{System: 0, User: 1, Assistant: 2, Observation: 3, Summary: 4, EndOfTurn: 5}

type byteTok struct{}

func (byteTok) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = 100 + int(s[i])
	}
	return ids
}

func (byteTok) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 100 {
			b.WriteByte(byte(id - 100))
		}
	}
	return b.String()
}

// policy replies with numbered commands and, when asked for a summary
// (its token limit), with a summary that keeps the first fact only.
type policy struct {
	cfg     agent.Config
	actions int
}

func (p *policy) Sample(_ context.Context, req infer.Request) (infer.Completion, error) {
	text := fmt.Sprintf("cat file%d", p.actions)
	if req.MaxTokens == p.cfg.MaxSummaryTokens {
		text = "Goal: report the code. Known: alpha=1."
	} else {
		p.actions++
	}
	ids := append(byteTok{}.Encode(text), tmpl.EndOfTurn)
	return infer.Completion{Tokens: ids, Logprobs: make([]float64, len(ids))}, nil
}

// factEnv shows one fact per step inside a long listing, and audits a
// summary by the facts it names.
type factEnv struct {
	steps int
	seen  []string
}

var facts = []string{"alpha=1", "beta=2", "gamma=3", "delta=4", "eps=5", "zeta=6", "eta=7", "theta=8"}

func (e *factEnv) Reset(context.Context) (string, error) {
	return "Read the files and report the code.", nil
}

func (e *factEnv) Step(_ context.Context, reply string) (agent.Step, error) {
	if e.steps == 7 {
		return agent.Step{Done: true, Reward: 1, Observation: "correct"}, nil
	}
	f := facts[e.steps]
	e.steps++
	e.seen = append(e.seen, f)
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		if i == 10 {
			fmt.Fprintf(&b, "%s\n", f)
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return agent.Step{Observation: b.String()}, nil
}

func (e *factEnv) SummaryQuality(s string) float64 {
	kept, _ := e.SummaryAudit(s)
	return float64(len(kept)) / float64(len(e.seen))
}

func (e *factEnv) SummaryAudit(s string) (kept, lost []string) {
	for _, f := range e.seen {
		if strings.Contains(s, f) {
			kept = append(kept, f)
		} else {
			lost = append(lost, f)
		}
	}
	return kept, lost
}

// run plays one episode that compacts, through the real agent loop.
func run(t *testing.T) episode.Episode {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.Context, cfg.Reserve, cfg.MaxActionTokens, cfg.MaxSummaryTokens = 900, 300, 24, 60
	cfg.SystemPrompt, cfg.SummaryInstruction, cfg.ResumeText = "You are an agent.", "Summarise.", "Your summary:"
	cfg.KeepLast = 1
	p := &policy{cfg: cfg}
	a, err := agent.New(context.Background(), cfg, agent.Local(byteTok{}), tmpl, p)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := a.Run(context.Background(), &factEnv{}, 1)
	if err != nil || ep.Status != episode.StatusOK || ep.Metrics[agent.MetricCompactions] < 1 {
		t.Fatalf("episode: err %v, status %s, metrics %v", err, ep.Status, ep.Metrics)
	}
	return ep
}

func render(ep *episode.Episode, full bool) string {
	var b bytes.Buffer
	Write(&b, ep, byteTok{}, tmpl, full)
	return b.String()
}

// A compacted episode renders with its header, every segment, the policy's
// own turns marked *, the summary request, the compaction line with the
// summary's quality and what it kept and lost, and the next segment's
// resumed prompt with its re-included step.
func TestWriteMarksCompactionKeptAndLost(t *testing.T) {
	ep := run(t)
	out := render(&ep, false)
	defer func() {
		if t.Failed() {
			t.Log("\n" + out)
		}
	}()

	if !strings.HasPrefix(out, "episode ") || !strings.Contains(out, "status ok  reward 1") ||
		!strings.Contains(out, fmt.Sprintf("compactions %g", ep.Metrics[agent.MetricCompactions])) {
		t.Errorf("header: %q", strings.SplitN(out, "\n", 2)[0])
	}
	if got := strings.Count(out, "── segment "); got != len(ep.Segments) {
		t.Errorf("%d segment headers, %d segments", got, len(ep.Segments))
	}
	// the first segment wrote the summary: its line says what was kept and lost
	comp := regexp.MustCompile(`══ compaction 1 · summary quality ([0-9.]+) · kept: (.*) · lost: (.*) ══`).FindStringSubmatch(out)
	if comp == nil {
		t.Fatalf("no compaction line")
	}
	if comp[2] != ep.Meta["summary_1_kept"] || comp[2] != "alpha=1" {
		t.Errorf("kept %q, meta %q", comp[2], ep.Meta["summary_1_kept"])
	}
	if comp[3] != ep.Meta["summary_1_lost"] || strings.Contains(comp[3], "alpha=1") || !strings.Contains(comp[3], "beta=2") {
		t.Errorf("lost %q, meta %q", comp[3], ep.Meta["summary_1_lost"])
	}
	if comp[1] != fmt.Sprintf("%.3f", ep.Metrics["summary_1_quality"]) {
		t.Errorf("quality %s, metric %v", comp[1], ep.Metrics["summary_1_quality"])
	}
	if ep.Segments[0].Kind != episode.KindSummary || !strings.Contains(out, "── segment 1 · summary · ") {
		t.Errorf("segment 1 is not marked as the summary's")
	}
	// the summary request is marked, and the summary is the policy's own (trained) turn
	for _, want := range []string{
		"user (summary request)     │ Summarise.",
		"summary*                   │ Goal: report the code. Known: alpha=1.",
		"assistant*                 │ cat file0",
		"(resumed from the summary with 1 re-included steps)",
		"assistant (re-included)    │ ",
		"summary                    │ Goal: report the code. Known: alpha=1.", // prompt of the next segment: not trained
		"final observation: correct",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	// observations are never marked as trained
	if strings.Contains(out, "observation*") {
		t.Error("an observation is marked as trained")
	}
	// long observations show their head and tail only, unless full
	// (20 lines and the empty one after the last newline: 5 + 11 + 5)
	if !strings.Contains(out, "│ … 11 lines …\n") || strings.Contains(out, "│ line 8\n") || strings.Contains(out, "│ beta=2\n") {
		t.Error("a long observation is not cut to its head and tail")
	}
	full := render(&ep, true)
	if strings.Contains(full, "lines …") || !strings.Contains(full, "│ line 8\n") || !strings.Contains(full, "│ beta=2\n") {
		t.Error("full does not show every observation line")
	}
}

// A summary that lost nothing (and one that kept nothing) says "(none)";
// without an audit the compaction line has no kept/lost part; the end
// reason and error of the episode are shown.
func TestWriteCompactionLineVariants(t *testing.T) {
	ep := run(t)
	ep.Meta["summary_1_kept"], ep.Meta["summary_1_lost"] = "", ""
	ep.Meta[agent.MetaError] = "sandbox died"
	out := render(&ep, false)
	if !strings.Contains(out, " · kept: (none) · lost: (none) ══") || !strings.Contains(out, "end_reason: done\n") || !strings.Contains(out, agent.MetaError+": sandbox died\n") {
		t.Errorf("no (none) markers or end reason:\n%s", out)
	}
	delete(ep.Meta, "summary_1_kept")
	delete(ep.Metrics, "summary_1_quality")
	out = render(&ep, false)
	if !strings.Contains(out, "══ compaction 1 ══") {
		t.Errorf("bare compaction line missing:\n%s", out)
	}
}
