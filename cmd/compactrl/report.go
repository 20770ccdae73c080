package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/compactrl/compactrl/report"
)

// runReport renders RUN_DIR/metrics.jsonl as RUN_DIR/report.html.
func runReport(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: compactrl report RUN_DIR\n\nWrites RUN_DIR/report.html (learning curves, summary quality, PPO diagnostics) from RUN_DIR/metrics.jsonl.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("need exactly one RUN_DIR")
	}
	path, err := report.Generate(fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, path)
	return nil
}
