// Package stats holds the interval estimates that every report of pass@1
// uses: the Wilson score interval of a pass rate over the episodes of one
// evaluation (independent tasks, one run), the Student-t interval of a
// mean over seeds, and the hierarchical bootstrap over RL seeds and tasks
// (HierarchicalMean, PairedDiff) that compares arms evaluated on the same
// tasks: the interval of an effect across runs, which neither a Wilson
// interval over pooled episodes (it counts one task once per seed as if
// independent, and leaves out the seed-to-seed spread) nor a t-interval
// over seeds (it leaves out the task sampling) gives; and ClusterRate, a
// pass rate over tasks attempted several times, whose interval counts a
// task's attempts as one cluster.
package stats

import (
	"fmt"
	"math"
)

// z975 is the 0.975 quantile of the standard normal.
const z975 = 1.959963984540054

// Wilson returns the 95% Wilson score interval of k successes in n trials:
//
//	(p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)
//
// (NaN, NaN) when n is 0.
func Wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	p := float64(k) / float64(n)
	nn := float64(n)
	den := 1 + z975*z975/nn
	c := (p + z975*z975/(2*nn)) / den
	h := z975 * math.Sqrt(p*(1-p)/nn+z975*z975/(4*nn*nn)) / den
	return math.Max(0, c-h), math.Min(1, c+h)
}

// RateCI formats a pass rate p over n trials with its 95% Wilson
// interval, as every report prints it: "0.227 [0.180, 0.282]" (k = p·n
// rounded to the nearest count).
func RateCI(p float64, n int) string {
	lo, hi := Wilson(int(math.Round(p*float64(n))), n)
	return fmt.Sprintf("%.3f [%.3f, %.3f]", p, lo, hi)
}

// SeedMean is the mean of per-seed values with the 95% Student-t interval
// across seeds: m ± t_{0.975, n−1} · sd/√n (sd with n−1). One value has no
// interval (NaN bounds); none gives NaN throughout.
func SeedMean(v []float64) (m, lo, hi float64) {
	n := len(v)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	for _, x := range v {
		m += x
	}
	m /= float64(n)
	if n == 1 {
		return m, math.NaN(), math.NaN()
	}
	var ss float64
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	h := t975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	return m, m - h, m + h
}

// t975 is the 0.975 quantile of Student's t with df ≥ 1 degrees of freedom
// (table values to 3 decimals up to 30; the normal's 1.960 past it).
func t975(df int) float64 {
	t := [...]float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < len(t) {
		return t[df]
	}
	return 1.960
}
