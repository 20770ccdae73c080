// Package eval is the results model of `compactrl eval`: what one
// evaluation of a policy on real tasks keeps of each episode, how those
// verdicts aggregate into pass@1 with its 95% interval, per task and
// overall, and the results.json file that holds them; and, for paired
// comparisons, reading the per-task outcomes of finished runs back.
//
// Data flow: the command plays the episodes through package rollout with a
// Collector in its sink chain, which keeps each episode's Verdict;
// Summarize aggregates the verdicts into Results (scored episodes only:
// infra_error and verifier_error are counted but masked), with Wilson's
// interval, or with several attempts a task an interval over the effective
// number of attempts (stats.ClusterRate); Results.WriteFile writes
// results.json, WriteTable and WriteOracleFailures print them. For `eval
// compare`, ReadRuns turns run directories, outcomes files and episode
// files into train.EvalResults that package experiment pairs task by task.
// WriteHeldOut prints the built-in suite's held-out evaluation
// (train.EvalResult) that `eval checkpoint` runs.
package eval

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"

	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/stats"
)

// Verdict is what results.json keeps of one episode.
type Verdict struct {
	ID          string         `json:"id"`
	Task        string         `json:"task"`
	Status      episode.Status `json:"status"`
	Reward      float64        `json:"reward"`
	Success     bool           `json:"success"`
	Compactions float64        `json:"compactions"`
	Turns       float64        `json:"turns"`
	Error       string         `json:"error,omitempty"`
	// RewardNote says why a verifier that ran gave no valid reward (the
	// attempt scored 0); CloseError reports a sandbox or workspace that
	// could not be cleaned up after the episode.
	RewardNote string `json:"reward_note,omitempty"`
	CloseError string `json:"close_error,omitempty"`
	// Detail is the tail of the final observation (the verifier's output)
	// of an episode that did not succeed.
	Detail string `json:"detail,omitempty"`
}

// TaskResult aggregates one task's attempts.
type TaskResult struct {
	Task        string                 `json:"task"`
	Attempts    int                    `json:"attempts"`
	Scored      int                    `json:"scored"` // attempts that were not infra_error
	Successes   int                    `json:"successes"`
	Pass1       *float64               `json:"pass1"`
	MeanReward  *float64               `json:"mean_reward"`
	Compactions float64                `json:"mean_compactions"`
	Statuses    map[episode.Status]int `json:"statuses"`
	Episodes    []Verdict              `json:"episodes"`
}

// Results is results.json.
type Results struct {
	Meta     map[string]string `json:"meta"`
	Attempts int               `json:"attempts_per_task"`
	Episodes int               `json:"episodes"`
	// Scored excludes infra_error episodes (masked, never scored 0).
	Scored     int `json:"scored"`
	InfraError int `json:"infra_errors"`
	// VerifierError counts verifier_error episodes: the task's verifier
	// could not run or finish (masked like infra_error).
	VerifierError int `json:"verifier_errors"`
	Successes     int `json:"successes"`
	// Pass1 is successes / scored, a success being status ok and a full
	// reward (episode.Success);
	// Pass1CI its 95% interval: Wilson's with one attempt a task, else
	// Wilson's on the effective number of attempts (stats.ClusterRate;
	// Pass1CIMethod says which). Absent when nothing
	// was scored.
	Pass1           *float64               `json:"pass1"`
	Pass1CI         []float64              `json:"pass1_ci95,omitempty"`
	Pass1CIMethod   string                 `json:"pass1_ci95_method,omitempty"`
	MeanReward      *float64               `json:"mean_reward"`
	MeanCompactions float64                `json:"mean_compactions"`
	Compacted       int                    `json:"compacted_episodes"` // scored episodes with ≥ 1 compaction
	Pass1Compacted  *float64               `json:"pass1_compacted"`    // pass@1 among them
	Statuses        map[episode.Status]int `json:"statuses"`
	Tasks           []TaskResult           `json:"tasks"`
	Skipped         []tasks.Skipped        `json:"skipped,omitempty"`
}

// WriteFile writes r as indented JSON (results.json) to path.
func (r Results) WriteFile(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func ptr(v float64) *float64 { return &v }

// Summarize computes pass@1 = (1/n) Σ 1[ok ∧ Success(R)] over the n scored
// episodes of vs, its 95% interval, and per-task results in the order of
// the task names: every task of names (those never played with no
// attempts) and every task a verdict names. attempts, skipped and meta are
// recorded as they are.
func Summarize(vs []Verdict, names []string, attempts int, skipped []tasks.Skipped, meta map[string]string) Results {
	res := Results{Meta: meta, Attempts: attempts, Statuses: map[episode.Status]int{}, Skipped: skipped}
	byTask := map[string]*TaskResult{}
	for _, n := range names {
		byTask[n] = &TaskResult{Task: n, Statuses: map[episode.Status]int{}}
	}
	vs = slices.Clone(vs)
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	var sums scoredSums
	for _, v := range vs {
		tr := byTask[v.Task]
		if tr == nil {
			tr = &TaskResult{Task: v.Task, Statuses: map[episode.Status]int{}}
			byTask[v.Task] = tr
		}
		sums.count(&res, tr, v)
	}
	sums.rates(&res)
	res.Tasks = taskRates(byTask)
	clusterCI(&res)
	return res
}

// clusterCI replaces pass@1's Wilson interval over episodes by one over
// the effective number of independent attempts when some task was
// attempted more than once: the attempts of one task are not independent
// evidence (stats.ClusterRate).
func clusterCI(res *Results) {
	k, n := make([]int, len(res.Tasks)), make([]int, len(res.Tasks))
	repeated := false
	for i, t := range res.Tasks {
		k[i], n[i] = t.Successes, t.Scored
		repeated = repeated || t.Scored > 1
	}
	if !repeated || res.Scored == 0 {
		return
	}
	if b, err := stats.ClusterRate(k, n); err == nil {
		res.Pass1CI, res.Pass1CIMethod = []float64{b.Lo, b.Hi}, "Wilson on the effective attempts (task design effect)"
	}
}

// scoredSums are the sums over scored episodes that the overall means
// divide.
type scoredSums struct {
	reward, compactions float64
	compactedSuccesses  int
}

// count adds verdict v to the overall counts and to its task's; an
// infra_error or verifier_error episode is counted but not scored.
func (s *scoredSums) count(res *Results, tr *TaskResult, v Verdict) {
	res.Episodes++
	res.Statuses[v.Status]++
	tr.Attempts++
	tr.Statuses[v.Status]++
	tr.Episodes = append(tr.Episodes, v)
	if v.Status == episode.StatusInfraError {
		res.InfraError++
		return
	}
	if v.Status == episode.StatusVerifierError {
		res.VerifierError++
		return
	}
	res.Scored++
	tr.Scored++
	s.reward += v.Reward
	s.compactions += v.Compactions
	tr.Compactions += v.Compactions
	if v.Success {
		res.Successes++
		tr.Successes++
	}
	if v.Compactions > 0 {
		res.Compacted++
		if v.Success {
			s.compactedSuccesses++
		}
	}
}

// rates sets pass@1 and its 95% Wilson interval, the mean reward and
// compactions over the scored episodes, and pass@1 among the compacted ones.
func (s *scoredSums) rates(res *Results) {
	if res.Scored > 0 {
		res.Pass1 = ptr(float64(res.Successes) / float64(res.Scored))
		lo, hi := stats.Wilson(res.Successes, res.Scored)
		res.Pass1CI, res.Pass1CIMethod = []float64{lo, hi}, "Wilson"
		res.MeanReward = ptr(s.reward / float64(res.Scored))
		res.MeanCompactions = s.compactions / float64(res.Scored)
	}
	if res.Compacted > 0 {
		res.Pass1Compacted = ptr(float64(s.compactedSuccesses) / float64(res.Compacted))
	}
}

// taskRates turns each task's counts into its pass@1 and means over its
// scored episodes, in the order of the task names.
func taskRates(byTask map[string]*TaskResult) []TaskResult {
	var out []TaskResult
	for _, n := range slices.Sorted(maps.Keys(byTask)) {
		tr := byTask[n]
		if tr.Scored > 0 {
			tr.Pass1 = ptr(float64(tr.Successes) / float64(tr.Scored))
			sum := 0.0
			for _, v := range tr.Episodes {
				if episode.Status(v.Status).Scored() {
					sum += v.Reward
				}
			}
			tr.MeanReward = ptr(sum / float64(tr.Scored))
			tr.Compactions /= float64(tr.Scored)
		}
		out = append(out, *tr)
	}
	return out
}
