package experiment

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/compactrl/compactrl/episode"
)

// OutcomeRow is one line of an experiment's outcomes.jsonl: one evaluation
// task of one arm's run with one RL seed.
type OutcomeRow struct {
	Arm            string         `json:"arm"`
	RLSeed         int64          `json:"rl_seed"`
	Range          string         `json:"range"`
	TaskSeed       int64          `json:"task_seed"`
	Status         episode.Status `json:"status"`
	Scored         bool           `json:"scored"`
	Pass           int            `json:"pass"`
	Reward         float64        `json:"reward"`
	Compactions    float64        `json:"compactions"`
	SummaryQuality *float64       `json:"summary_quality,omitempty"`
	SinglePass     int            `json:"single_pass"`
}

// WriteOutcomes writes every task outcome of results as JSON lines, arm by
// arm, seed by seed, in task order (runs without per-task outcomes, such
// as those of an older binary, write nothing).
func WriteOutcomes(w io.Writer, results []ArmResult) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		for i, ev := range r.Evals {
			for _, o := range ev.Outcomes {
				row := OutcomeRow{Arm: r.Arm.Name, RLSeed: r.Seeds[i], Range: ev.Range, TaskSeed: o.TaskSeed, Status: o.Status, Scored: o.Scored,
					Pass: o.Pass, Reward: o.Reward, Compactions: o.Compactions, SummaryQuality: o.SummaryQuality, SinglePass: o.SinglePass}
				if err := enc.Encode(row); err != nil {
					return fmt.Errorf("outcomes of arm %s: %w", r.Arm.Name, err)
				}
			}
		}
	}
	return nil
}
