package vault

import (
	"context"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/tokenizer"
)

// TestChatExpertPlaysInChatML: the expert reads contexts laid out with a
// real model's chat template (ChatML) and plays as it does in the built-in
// layout: with lossless summaries it solves the tasks through its
// compactions.
func TestChatExpertPlaysInChatML(t *testing.T) {
	corpus := SystemPrompt + "\n" + agent.DefaultSummaryInstruction() + "\n" + agent.DefaultResumeText() +
		"\ntask: report the values of oak. the vault has 5 files. file 1 has 3 pages record note answer open read goal found at"
	tok, err := tokenizer.Train([]string{corpus}, 600, []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := agent.NewChatFormat(agent.Presets()["chatml"], tok)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.SystemPrompt = SystemPrompt
	cfg.Context, cfg.Reserve, cfg.MaxActionTokens = 3000, 1100, 64 // a small test vocabulary spends about a token a character
	ex, err := NewChatExpert(tok, f, cfg.ResumeText, cfg.SummaryInstruction, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewWithFormat(context.Background(), cfg, agent.Local(tok), f, ex)
	if err != nil {
		t.Fatal(err)
	}
	n := 40
	if testing.Short() {
		n = 12
	}
	success, compactions := 0, 0.0
	for i := range n {
		ep := playValid(t, a, DefaultConfig(), TestSeeds().Start+int64(i), int64(i))
		if ep.Status != episode.StatusOK {
			t.Fatalf("task %d: status %s (%s)", i, ep.Status, ep.Meta["end_reason"])
		}
		if ep.Reward == 1 {
			success++
		}
		compactions += ep.Metrics[agent.MetricCompactions]
	}
	t.Logf("%d tasks in ChatML: %d solved, %.2f compactions an episode", n, success, compactions/float64(n))
	if success < n*95/100 || compactions == 0 {
		t.Fatalf("the lossless expert in ChatML solved %d of %d with %.0f compactions", success, n, compactions)
	}
	if _, err := NewChatExpert(tok, f, "", cfg.SummaryInstruction, 1, 1); err == nil {
		t.Error("no resume text: accepted")
	}
}
