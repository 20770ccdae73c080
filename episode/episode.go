// Package episode defines the unit of data that flows from the agent loop to
// the trainer: an Episode (one attempt at one task) made of Segments (one
// context window's worth of tokens each), and its JSONL encoding (one episode
// a line, docs/design.md §3).
//
// Data flow: the agent loop builds Episodes from the exact token ids it sent
// to and received from the sampler; rl fills Values/Advantages/Returns; the
// trainer reads the trainable segments. Every per-token slice of a Segment
// (LossMask, Logprobs, Values, Advantages, Returns) is aligned with
// ResponseIDs.
package episode

// Kind says what a segment's response ends with.
type Kind string

const (
	// KindExec is a segment whose response is task actions and observations.
	KindExec Kind = "exec"
	// KindSummary is a segment whose last policy output is a summary S_t.
	KindSummary Kind = "summary"
)

// Status is how an episode ended.
type Status string

const (
	StatusOK          Status = "ok"           // finished (success or failure is in Reward)
	StatusOverlong    Status = "overlong"     // hit max_turns or max_compactions, or the window without compaction
	StatusInfraError  Status = "infra_error"  // engine or environment failure: masked, never scored
	StatusFormatError Status = "format_error" // too many unparseable actions in a row
	// StatusVerifierError: the task's verifier could not run or finish
	// (missing interpreter, a test script that does not parse, a timeout):
	// masked like infra_error, never scored, counted apart.
	StatusVerifierError Status = "verifier_error"
)

// Segment is one context window: a prompt (never trained) and a response
// region in which policy tokens have LossMask 1 and observation/template
// tokens LossMask 0.
type Segment struct {
	Kind        Kind      `json:"kind"`
	Trainable   bool      `json:"trainable"`
	PromptIDs   []int     `json:"prompt_ids"`
	ResponseIDs []int     `json:"response_ids"`
	LossMask    []int     `json:"loss_mask"`
	Logprobs    []float64 `json:"logprobs,omitempty"`
	Values      []float64 `json:"values,omitempty"`
	Advantages  []float64 `json:"advantages,omitempty"`
	Returns     []float64 `json:"returns,omitempty"`
}

// MetaSummaryOverride is the Meta key of an episode whose summaries were
// not the policy's but replaced at evaluation (agent.SummaryOverride):
// such an episode is not training data, and trainers refuse it.
const MetaSummaryOverride = "summary_override"

// Episode is one rollout of one task, possibly compacted into several segments.
type Episode struct {
	ID       string    `json:"id"`
	Task     string    `json:"task"`
	Group    string    `json:"group,omitempty"`
	Reward   float64   `json:"reward"`
	Status   Status    `json:"status"`
	Segments []Segment `json:"segments"`
	// Metrics carries per-episode measurements (turns, compactions,
	// summary_quality, ...); optional.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Meta carries free-form provenance (policy, tokenizer, seed, ...); optional.
	Meta map[string]string `json:"meta,omitempty"`
}

// NumOptimised returns the number of response tokens with LossMask 1 in
// trainable segments: the episode's l in λ = 1 − 1/(α·l).
func (e *Episode) NumOptimised() int {
	n := 0
	for i := range e.Segments {
		s := &e.Segments[i]
		if !s.Trainable {
			continue
		}
		for _, m := range s.LossMask {
			n += m
		}
	}
	return n
}

// NumOptimised returns the number of response tokens with LossMask 1
// (whether or not the segment is trainable).
func (s *Segment) NumOptimised() int {
	n := 0
	for _, m := range s.LossMask {
		n += m
	}
	return n
}

// Scored reports whether an episode of status s counts in pass@1 and in
// the loss: infra_error and verifier_error episodes are masked.
func (s Status) Scored() bool { return s != StatusInfraError && s != StatusVerifierError }
