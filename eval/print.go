package eval

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/stats"
	"github.com/compactrl/compactrl/train"
)

// FormatOptional formats *p with format, or "n/a" when p is nil or NaN (a
// rate or mean over nothing).
func FormatOptional(p *float64, format string) string {
	if p == nil || math.IsNaN(*p) {
		return "n/a"
	}
	return fmt.Sprintf(format, *p)
}

// WriteTable writes the per-task table and the totals.
func (r Results) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tattempts\tpass@1\tmean reward\tcompactions\tstatuses")
	for _, t := range r.Tasks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.2f\t%s\n", t.Task, t.Attempts, FormatOptional(t.Pass1, "%.3f"), FormatOptional(t.MeanReward, "%.3f"), t.Compactions, statusList(t.Statuses))
	}
	tw.Flush()
	ci := ""
	if len(r.Pass1CI) == 2 {
		ci = fmt.Sprintf(" [%.3f, %.3f]", r.Pass1CI[0], r.Pass1CI[1])
	}
	fmt.Fprintf(w, "pass@1 %s%s over %d scored episodes (%d infra_error, %d verifier_error, masked); mean compactions %.2f; pass@1 of compacted %s (%d episodes)\n",
		FormatOptional(r.Pass1, "%.3f"), ci, r.Scored, r.InfraError, r.VerifierError, r.MeanCompactions, FormatOptional(r.Pass1Compacted, "%.3f"), r.Compacted)
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Task, s.Reason)
	}
	if r.Episodes > 0 && r.Scored == 0 {
		fmt.Fprintf(w, "NOTHING COULD BE SCORED: all %d episodes were infra_error or verifier_error (see the errors in results.json)\n", r.Episodes)
	}
}

// WriteOracleFailures lists the tasks whose own solution (the gold patch
// of a SWE-bench instance) did not succeed on every attempt, and those
// skipped, so that an environment can be validated before training.
func (r Results) WriteOracleFailures(w io.Writer) {
	var bad []string
	for _, t := range r.Tasks {
		if t.Successes == t.Attempts {
			continue
		}
		why := ""
		for _, v := range t.Episodes {
			if !v.Success {
				why = cmp.Or(v.Error, v.RewardNote, v.Detail)
				break
			}
		}
		bad = append(bad, fmt.Sprintf("  %s (%d/%d; %s): %s", t.Task, t.Successes, t.Attempts, statusList(t.Statuses), oneLine(why, 300)))
	}
	for _, s := range r.Skipped {
		bad = append(bad, fmt.Sprintf("  %s (skipped): %s", s.Task, oneLine(s.Reason, 300)))
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "oracle: the solution resolves all %d tasks\n", len(r.Tasks))
		return
	}
	fmt.Fprintf(w, "oracle: %d of %d tasks are not resolved by their own solution (gold patch), or could not run:\n%s\n", len(bad), len(r.Tasks)+len(r.Skipped), strings.Join(bad, "\n"))
}

// statusList is "status=count …" in the order of the statuses.
func statusList(m map[episode.Status]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(out, " ")
}

// oneLine is s with its runs of white space made single spaces, cut to n
// bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// WriteHeldOut writes a held-out evaluation of the built-in suite: pass@1
// with and without compaction with 95% Wilson intervals, summary quality
// and compactions; window and temperature are the settings it ran with.
func WriteHeldOut(w io.Writer, ev train.EvalResult, window int, temperature float64) {
	n := ev.Episodes
	row := func(name string, p float64) { fmt.Fprintf(w, "%-28s %s\n", name, stats.RateCI(p, n)) }
	fmt.Fprintf(w, "%s range, task seeds %d…%d (%d episodes per mode), window %d, temperature %g\n",
		ev.Range, ev.FirstSeed, ev.FirstSeed+int64(n)-1, n, window, temperature)
	row("pass@1 with compaction", ev.Pass1Compact)
	row("pass@1 single window", ev.Pass1Single)
	fmt.Fprintf(w, "%-28s %s\n%-28s %.2f\n%-28s %s\n", "summary quality", FormatOptional(&ev.SummaryQuality, "%.3f"), "compactions / episode", ev.Compactions, "pass@1 of compacted", FormatOptional(&ev.PassCompacted, "%.3f"))
}
