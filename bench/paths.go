package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/compactrl/compactrl/kernel"
)

// WritePathsTable renders the reports of one bench run per kernel code path
// (the same options, COMPACTRL_KERNEL set per process) side by side: one
// column per path, each cell the path's value and its ratio to the
// reference of its row. The references (PyTorch, llama.cpp) do not depend
// on the path: they come from the first report that has them. GEMM ratios
// are against each path's own FMA peak, measured in its own run.
func WritePathsTable(w io.Writer, rs []*Report) error {
	if len(rs) == 0 {
		return fmt.Errorf("bench paths table: no reports")
	}
	first := rs[0]
	for _, r := range rs[1:] {
		if len(r.Gemm) != len(first.Gemm) || r.Threads != first.Threads || r.Model != first.Model {
			return fmt.Errorf("bench paths table: the %s report measured other shapes or threads than the %s one", r.KernelPath, first.KernelPath)
		}
	}
	var torch []TorchResult
	var torchFrom *Report
	var llama *LlamaResult
	for _, r := range rs {
		if len(torch) == 0 && len(r.Torch) > 0 {
			torch, torchFrom = r.Torch, r
		}
		if llama == nil && r.Llama != nil {
			llama = r.Llama
		}
	}
	var b strings.Builder
	c := first.Model
	fmt.Fprintf(&b, "%s · %s · %d threads · %s · one process per kernel path\n\n", first.Date, first.Machine, first.Threads, first.GoVersion)
	fmt.Fprintf(&b, "Model: d=%d, %d layers, %d heads (%d KV), FFN %d, vocab %d, %.2fM parameters, float32. Training: batch %d × seq %d. Decode: %d sequences, %d-token prompts, %d new tokens.\n\n",
		c.Dim, c.Layers, c.Heads, c.KVHeads, c.FFN, c.Vocab, float64(first.Params)/1e6, first.Batch, first.Seq, first.DecodeBatch, first.Prompt, first.DecodeTokens)
	b.WriteString("| measurement | reference |")
	for _, r := range rs {
		fmt.Fprintf(&b, " %s |", r.KernelPath)
	}
	b.WriteString("\n|---|---|")
	for range rs {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	row := func(what, refName string, ref float64, val func(r *Report) float64, note func(r *Report) string) {
		refCell := refName
		if ref > 0 {
			refCell = fmt.Sprintf("%s: %s", refName, num(ref))
		}
		fmt.Fprintf(&b, "| %s | %s |", what, refCell)
		for _, r := range rs {
			v := val(r)
			if ref > 0 {
				extra := ""
				if note != nil {
					extra = ", " + note(r)
				}
				fmt.Fprintf(&b, " %s (%.2f×%s) |", num(v), v/ref, extra)
			} else {
				fmt.Fprintf(&b, " %s |", num(v))
			}
		}
		b.WriteString("\n")
	}
	if len(torch) == 0 {
		row("training tokens/s", "PyTorch (skipped)", 0, func(r *Report) float64 { return r.Train.Value }, nil)
	}
	for i, t := range torch {
		// Only the run that measured PyTorch interleaved its rounds with it.
		note := func(r *Report) string {
			if r != torchFrom {
				return "not interleaved: INVALID"
			}
			if !torchFrom.Torch[i].VsCompactrl.Validity.Valid {
				return "INVALID"
			}
			return "valid"
		}
		row("training tokens/s", t.Label(), t.Train.Value, func(r *Report) float64 { return r.Train.Value }, note)
	}
	llamaName, llamaDec, llamaGen := "llama.cpp (skipped)", 0.0, 0.0
	if llama != nil {
		llamaName, llamaDec, llamaGen = llama.Engine, llama.Rate.Decode.Value, llama.Rate.Generate.Value
	}
	row(fmt.Sprintf("batch-%d decode tokens/s", first.DecodeBatch), llamaName, llamaDec, func(r *Report) float64 { return r.Decode.Decode.Value }, nil)
	row(fmt.Sprintf("batch-%d generate tokens/s", first.DecodeBatch), llamaName, llamaGen, func(r *Report) float64 { return r.Decode.Generate.Value }, nil)
	for i, g := range first.Gemm {
		fmt.Fprintf(&b, "| GEMM %s GFLOP/s | the path's FMA peak |", g.Shape.Name)
		for _, r := range rs {
			v := r.Gemm[i].GFLOPS.Value
			fmt.Fprintf(&b, " %s (%.0f%%) |", num(v), 100*v/r.PeakGFLOPS)
		}
		b.WriteString("\n")
	}
	row(fmt.Sprintf("float32 FMA peak, %d threads, GFLOP/s", first.Threads), "", 0, func(r *Report) float64 { return r.PeakGFLOPS }, nil)
	b.WriteString("\nLoad average (1 min) before → after each path's run:")
	for _, r := range rs {
		fmt.Fprintf(&b, " %s %.2f → %.2f;", r.KernelPath, r.Load1Start, r.Load1End)
	}
	b.WriteString("\nRun conditions:")
	for _, r := range rs {
		fmt.Fprintf(&b, " %s %s;", r.KernelPath, r.Validity)
	}
	b.WriteString("\nRates are medians of the timed runs; ratios are against the row's reference (GEMM: the path's own measured peak).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// ParsePaths reads a comma-separated list of kernel paths this CPU
// supports (kernel.Paths), or "all" for every one, each at most once.
func ParsePaths(spec string) ([]string, error) {
	if spec == "all" {
		return kernel.Paths(), nil
	}
	var out []string
	for _, p := range strings.Split(spec, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(kernel.Paths(), p) {
			return nil, fmt.Errorf("bench model --paths: %q is not a kernel path of this CPU (it supports %s)", p, strings.Join(kernel.Paths(), ", "))
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("bench model --paths: %q given twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// RunPaths measures each kernel path in its own process: self (this
// program) run with args (which must make it print one Report as JSON)
// and kernel.EnvPath set to the path; the references (PyTorch, llama.cpp)
// run in the first process only (skip lists the flags that turn them off
// in the others). Progress and the children's stderr go to progress.
func RunPaths(ctx context.Context, self string, paths, args, skip []string, progress io.Writer) ([]*Report, error) {
	var reports []*Report
	for i, p := range paths {
		child := slices.Clone(args)
		if i > 0 {
			child = append(child, skip...)
		}
		fmt.Fprintf(progress, "bench: kernel path %s (%d of %d)\n", p, i+1, len(paths))
		cmd := exec.CommandContext(ctx, self, child...)
		cmd.Env = append(os.Environ(), kernel.EnvPath+"="+p)
		cmd.Stderr = progress
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("bench model on kernel path %s: %w", p, err)
		}
		var r Report
		if err := json.Unmarshal(out, &r); err != nil {
			return nil, fmt.Errorf("bench model on kernel path %s: reading its report: %w", p, err)
		}
		if r.KernelPath != p {
			return nil, fmt.Errorf("bench model: the run for kernel path %s measured path %s", p, r.KernelPath)
		}
		reports = append(reports, &r)
	}
	return reports, nil
}

// Invalid says why each report that is not a valid comparison is not,
// "PATH: reasons", in order.
func Invalid(reports []*Report) []string {
	var invalid []string
	for _, r := range reports {
		if !r.Validity.Valid {
			invalid = append(invalid, r.KernelPath+": "+strings.Join(r.Validity.Reasons, "; "))
		}
	}
	return invalid
}
