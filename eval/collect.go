package eval

import (
	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rollout"
)

// Meta keys of the notes an episode may carry for its verdict: why a
// verifier that ran gave no valid reward, and why the environment could
// not be cleaned up after the episode.
const (
	MetaRewardNote = "reward_note"
	MetaCloseError = "close_error"
)

// detailChars is how much of a failed episode's final observation a
// Verdict keeps (its tail).
const detailChars = 600

// Collector is a rollout.Sink that passes every episode on to Next and
// keeps its Verdict for Summarize.
type Collector struct {
	Next     rollout.Sink
	verdicts []Verdict
}

// Write forwards ep to Next and, if Next took it, records its verdict.
func (c *Collector) Write(ep *episode.Episode) error {
	if err := c.Next.Write(ep); err != nil {
		return err
	}
	c.verdicts = append(c.verdicts, newVerdict(ep))
	return nil
}

// Verdicts are the verdicts of the episodes written so far, in the order
// they were written.
func (c *Collector) Verdicts() []Verdict { return c.verdicts }

// newVerdict is what results.json keeps of ep: its outcome, counts and
// notes, and for an episode that did not succeed the tail of its final
// observation.
func newVerdict(ep *episode.Episode) Verdict {
	v := Verdict{
		ID: ep.ID, Task: ep.Group, Status: ep.Status, Reward: ep.Reward,
		Success:     ep.Succeeded(),
		Compactions: ep.Metrics[agent.MetricCompactions], Turns: ep.Metrics[agent.MetricTurns],
		Error: ep.Meta[agent.MetaError], RewardNote: ep.Meta[MetaRewardNote], CloseError: ep.Meta[MetaCloseError],
	}
	if !v.Success {
		v.Detail = tail(ep.Meta[agent.MetaFinalObservation], detailChars)
	}
	return v
}

// tail is the last n bytes of s, marked "…" when cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
