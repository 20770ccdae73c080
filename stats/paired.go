package stats

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// An outcome grid holds one arm's evaluation: y[s][t] is the outcome (1 a
// success, 0 a failure, or a reward) of the run with RL seed s on
// evaluation task t. Every row has the same tasks in the same order (the
// arms of one comparison are evaluated on the same task seeds); NaN marks a
// task that was not scored in that run (an infrastructure failure).

// Bootstrap is a point estimate with its 95% percentile bootstrap
// interval.
type Bootstrap struct {
	Est    float64 // the estimate on the data as observed
	Lo, Hi float64 // 2.5% and 97.5% quantiles of the replicates
	Seeds  int     // RL seeds (rows) of the arm; for a difference, of the arm compared
	Tasks  int     // tasks used (columns scored in every row of every grid)
}

// GridMean is an arm's pass@1: the mean over seeds of each seed's mean
// over tasks,
//
//	ȳ = (1/S) Σ_s (1/T) Σ_t y[s][t],
//
// over the tasks scored in every seed. With equal task counts it is the
// mean over all cells; it weighs seeds equally by construction.
func GridMean(y [][]float64) float64 {
	keep := scoredEverywhere(y)
	return gridMean(y, keep, identity(len(y)), ones(len(keep)))
}

// seedMeans are each seed's mean over the tasks scored in every seed: the
// per-seed values a report lists beside the interval.
func seedMeans(y [][]float64) []float64 {
	keep := scoredEverywhere(y)
	out := make([]float64, len(y))
	for s := range y {
		out[s] = gridMean(y, keep, []int{s}, ones(len(keep)))
	}
	return out
}

// HierarchicalMean is an arm's pass@1 (GridMean) with a 95% interval that
// accounts for both the RL seeds and the tasks: each of reps replicates
// draws S seeds with replacement and, independently, T tasks with
// replacement, and recomputes
//
//	ȳ* = (1/S) Σ_{s ∈ S*} (1/T) Σ_{t ∈ T*} y[s][t].
//
// The interval is the 2.5% and 97.5% quantiles of the replicates (linear
// interpolation between order statistics). The same rng seed gives the same
// interval. With few seeds the resampled seed spread is narrower than the
// true one (a bootstrap over S values has (S−1)/S of their variance), so
// two seeds give an optimistic interval; five or more are needed for a
// claim.
func HierarchicalMean(y [][]float64, reps int, seed uint64) (Bootstrap, error) {
	if err := checkGrid("arm", y); err != nil {
		return Bootstrap{}, err
	}
	keep := scoredEverywhere(y)
	if len(keep) == 0 {
		return Bootstrap{}, errors.New("no task is scored in every seed")
	}
	if reps < 2 {
		return Bootstrap{}, fmt.Errorf("reps %d: need at least 2", reps)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc909))
	rep := make([]float64, reps)
	si := make([]int, len(y))
	w := make([]float64, len(keep))
	for b := range rep {
		drawSeeds(rng, si)
		drawTasks(rng, w)
		rep[b] = gridMean(y, keep, si, w)
	}
	lo, hi := quantiles(rep)
	return Bootstrap{Est: gridMean(y, keep, identity(len(y)), ones(len(keep))), Lo: lo, Hi: hi, Seeds: len(y), Tasks: len(keep)}, nil
}

// PairedDiff is the effect of arm a against arm b evaluated on the same
// tasks, Δ = ȳ_a − ȳ_b (GridMean of each, over the tasks scored in every
// seed of both), with a 95% interval from a hierarchical bootstrap that
// keeps the pairing by task: each replicate draws one set of T tasks with
// replacement, used by both arms, and each arm's seeds with replacement
// independently (RL seeds of different arms are different runs):
//
//	Δ* = (1/S_a) Σ_{s ∈ S_a*} (1/T) Σ_{t ∈ T*} y_a[s][t] − (1/S_b) Σ_{s ∈ S_b*} (1/T) Σ_{t ∈ T*} y_b[s][t].
//
// So the interval holds the seed-to-seed spread of both arms and the
// task-sampling spread of the difference, and no task counts as
// independent twice: a task drawn once weighs once in every seed of both
// arms. The interval is the 2.5% and 97.5% quantiles of the replicates;
// the same rng seed gives the same interval.
func PairedDiff(a, b [][]float64, reps int, seed uint64) (Bootstrap, error) {
	if err := checkGrid("arm", a); err != nil {
		return Bootstrap{}, err
	}
	if err := checkGrid("reference", b); err != nil {
		return Bootstrap{}, err
	}
	if len(a[0]) != len(b[0]) {
		return Bootstrap{}, fmt.Errorf("the arms were evaluated on %d and %d tasks: a paired difference needs the same tasks", len(a[0]), len(b[0]))
	}
	if reps < 2 {
		return Bootstrap{}, fmt.Errorf("reps %d: need at least 2", reps)
	}
	keep := scoredEverywhere(append(append([][]float64{}, a...), b...))
	if len(keep) == 0 {
		return Bootstrap{}, errors.New("no task is scored in every seed of both arms")
	}
	rng := rand.New(rand.NewPCG(seed, 0xbb67ae8584caa73b))
	rep := make([]float64, reps)
	sa, sb := make([]int, len(a)), make([]int, len(b))
	w := make([]float64, len(keep))
	for r := range rep {
		drawTasks(rng, w)
		drawSeeds(rng, sa)
		drawSeeds(rng, sb)
		rep[r] = gridMean(a, keep, sa, w) - gridMean(b, keep, sb, w)
	}
	lo, hi := quantiles(rep)
	one := ones(len(keep))
	est := gridMean(a, keep, identity(len(a)), one) - gridMean(b, keep, identity(len(b)), one)
	return Bootstrap{Est: est, Lo: lo, Hi: hi, Seeds: len(a), Tasks: len(keep)}, nil
}

// checkGrid reports a grid that has no seed, no task, or rows of unequal
// length.
func checkGrid(name string, y [][]float64) error {
	if len(y) == 0 {
		return fmt.Errorf("%s: no seed", name)
	}
	if len(y[0]) == 0 {
		return fmt.Errorf("%s: no task", name)
	}
	for s, row := range y {
		if len(row) != len(y[0]) {
			return fmt.Errorf("%s: seed %d has %d tasks, seed 0 has %d: every seed must be evaluated on the same tasks", name, s, len(row), len(y[0]))
		}
	}
	return nil
}

// scoredEverywhere are the tasks (columns) with a finite outcome in every
// row: a comparison uses only tasks every run scored.
func scoredEverywhere(y [][]float64) []int {
	if len(y) == 0 {
		return nil
	}
	var keep []int
	for t := range y[0] {
		ok := true
		for _, row := range y {
			if t >= len(row) || math.IsNaN(row[t]) || math.IsInf(row[t], 0) {
				ok = false
				break
			}
		}
		if ok {
			keep = append(keep, t)
		}
	}
	return keep
}

// gridMean is (1/|seeds|) Σ_{s ∈ seeds} Σ_k w_k y[s][keep_k] / Σ_k w_k:
// the mean over the (drawn) seeds of each seed's weighted task mean, w_k
// the number of times task keep_k was drawn.
func gridMean(y [][]float64, keep []int, seeds []int, w []float64) float64 {
	var wsum float64
	for _, x := range w {
		wsum += x
	}
	var total float64
	for _, s := range seeds {
		var m float64
		for k, t := range keep {
			if w[k] != 0 {
				m += w[k] * y[s][t]
			}
		}
		total += m / wsum
	}
	return total / float64(len(seeds))
}

// drawSeeds fills idx with len(idx) indices drawn uniformly with
// replacement from 0…len(idx)−1.
func drawSeeds(rng *rand.Rand, idx []int) {
	for i := range idx {
		idx[i] = rng.IntN(len(idx))
	}
}

// drawTasks sets w to the counts of len(w) draws with replacement from
// 0…len(w)−1.
func drawTasks(rng *rand.Rand, w []float64) {
	clear(w)
	for range w {
		w[rng.IntN(len(w))]++
	}
}

// quantiles are the 2.5% and 97.5% quantiles of v (sorted in place):
// linear interpolation at position q·(n−1) between order statistics.
func quantiles(v []float64) (lo, hi float64) {
	sort.Float64s(v)
	return Quantile(v, 0.025), Quantile(v, 0.975)
}

// Quantile is the q-quantile of sorted values v: the value at position
// q·(n−1), interpolating linearly between the two order statistics around
// it (NaN for no values).
func Quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := q * float64(n-1)
	i := int(math.Floor(pos))
	if i >= n-1 {
		return sorted[n-1]
	}
	if i < 0 {
		return sorted[0]
	}
	f := pos - float64(i)
	return sorted[i] + f*(sorted[i+1]-sorted[i])
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func ones(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// ClusterRate is a pass rate over tasks attempted several times, k[t]
// successes of n[t] scored attempts of task t: p̂ = Σk / Σn with a 95%
// Wilson interval on the effective number of attempts n_eff = Σn / deff,
// so that the attempts of one task do not count as independent evidence.
// The design effect is the ratio of the task-clustered variance of p̂ to
// the binomial one,
//
//	deff = [T/(T−1) · Σ_t (k[t] − p̂·n[t])² / (Σn)²] / [p̂(1−p̂)/Σn],
//
// clamped to [1, Σn/T] (at most every task counts once: n_eff ≥ T); when
// p̂ is 0 or 1 the data cannot show how alike a task's attempts are, and
// deff is Σn/T (each task once). With one attempt a task it is Wilson's
// interval. Tasks with no scored attempt take no part; none at all, or a
// single task with several attempts, is handled as above (T = 1 gives
// deff = Σn). Est is p̂, Tasks the tasks with a scored attempt.
func ClusterRate(k, n []int) (Bootstrap, error) {
	if len(k) != len(n) {
		return Bootstrap{}, fmt.Errorf("%d success counts for %d tasks", len(k), len(n))
	}
	var sk, sn float64
	tasks := 0
	for t := range n {
		if k[t] < 0 || k[t] > n[t] {
			return Bootstrap{}, fmt.Errorf("task %d: %d successes of %d attempts", t, k[t], n[t])
		}
		if n[t] > 0 {
			sk, sn, tasks = sk+float64(k[t]), sn+float64(n[t]), tasks+1
		}
	}
	if tasks == 0 {
		return Bootstrap{}, errors.New("no task has a scored attempt")
	}
	p := sk / sn
	maxDeff := sn / float64(tasks)
	deff := maxDeff
	if p > 0 && p < 1 && tasks > 1 {
		var ss float64
		for t := range n {
			if n[t] > 0 {
				d := float64(k[t]) - p*float64(n[t])
				ss += d * d
			}
		}
		vc := float64(tasks) / float64(tasks-1) * ss / (sn * sn)
		deff = math.Min(maxDeff, math.Max(1, vc/(p*(1-p)/sn)))
	}
	lo, hi := wilsonP(p, sn/deff)
	return Bootstrap{Est: p, Lo: lo, Hi: hi, Seeds: 1, Tasks: tasks}, nil
}

// wilsonP is Wilson's 95% interval of a rate p over n (possibly
// fractional: an effective number of) trials.
func wilsonP(p, n float64) (lo, hi float64) {
	den := 1 + z975*z975/n
	c := (p + z975*z975/(2*n)) / den
	h := z975 * math.Sqrt(p*(1-p)/n+z975*z975/(4*n*n)) / den
	return math.Max(0, c-h), math.Min(1, c+h)
}
