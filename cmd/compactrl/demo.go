package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/compactrl/compactrl/train"
)

// runDemo is the README's first command: on the embedded demo config
// (configs/demo.yaml is the same config as a file), warm start on the
// scripted expert, CompactionRL iterations, held-out evaluation, a table of
// pass@1 before and after, and the HTML report.
func runDemo(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cfg := train.DemoConfig()
	dir := fs.String("dir", cfg.Run.Dir, "run directory (replaced)")
	iters := fs.Int("iterations", cfg.Run.Iterations, "CompactionRL iterations")
	quiet := fs.Bool("quiet", false, "no progress bars")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the whole demo to this file")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: compactrl demo [flags]\n\nWarm start + CompactionRL on the built-in vault suite with a nano policy (about 10 minutes on 2 cores).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Run.Dir, cfg.Run.Iterations = *dir, *iters
	if err := cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "compactrl demo: %d expert demonstrations (summaries keep each fact with p = %.2f), %d warm-start steps,\n", cfg.SFT.Episodes, cfg.SFT.ExpertP, cfg.SFT.Steps)
	fmt.Fprintf(e.stdout, "then %d CompactionRL iterations of %d episodes (window %d tokens, %s, %s loss), %d held-out episodes per evaluation.\n",
		cfg.Run.Iterations, cfg.Run.Episodes, cfg.Agent.Context, cfg.RL.Estimator, cfg.RL.LossMode, cfg.Run.EvalEpisodes)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	start, cpu0 := time.Now(), train.ProcessCPU()
	res, err := trainRun(ctx, e, cfg, false, *quiet)
	if err != nil {
		return err
	}
	printResult(e, res)
	wall, cpu := time.Since(start), train.ProcessCPU()-cpu0
	fmt.Fprintf(e.stdout, "demo finished in %s wall, %s CPU (%.2f cores busy on average, GOMAXPROCS %d)\n",
		wall.Round(time.Second), cpu.Round(time.Second), cpu.Seconds()/wall.Seconds(), runtime.GOMAXPROCS(0))
	return nil
}
