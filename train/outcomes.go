package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// OutcomesDir is where a run directory keeps each evaluation's per-task
// outcomes: OutcomesDir/eval-NNNNNN.json after iteration N, final.json at
// the end.
const OutcomesDir = "outcomes"

// FinalOutcomes is the file of a run's final evaluation in its directory.
func FinalOutcomes(runDir string) string { return filepath.Join(runDir, OutcomesDir, "final.json") }

// outcomesFile is the JSON of an outcomes file: the evaluation's summary
// (with its range and first task seed) and its tasks one by one.
type outcomesFile struct {
	Eval     EvalResult `json:"eval"`
	Outcomes []Outcome  `json:"outcomes"`
}

// WriteOutcomes writes an evaluation with its per-task outcomes to path
// (atomically: a stopped run leaves the previous file or none).
func WriteOutcomes(path string, ev EvalResult) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("outcomes %s: %w", path, err)
	}
	b, err := json.Marshal(outcomesFile{ev, ev.Outcomes})
	if err != nil {
		return fmt.Errorf("outcomes %s: %w", path, err)
	}
	return writeAtomic(path, append(b, '\n'))
}

// ReadOutcomes reads a file of WriteOutcomes: the evaluation with its
// Outcomes.
func ReadOutcomes(path string) (EvalResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return EvalResult{}, fmt.Errorf("outcomes: %w", err)
	}
	var f outcomesFile
	if err := json.Unmarshal(b, &f); err != nil {
		return EvalResult{}, fmt.Errorf("outcomes %s: %w", path, err)
	}
	if len(f.Outcomes) != f.Eval.Episodes {
		return EvalResult{}, fmt.Errorf("outcomes %s: %d tasks for %d episodes", path, len(f.Outcomes), f.Eval.Episodes)
	}
	f.Eval.Outcomes = f.Outcomes
	return f.Eval, nil
}
