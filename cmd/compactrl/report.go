package main

import (
	"context"
	"fmt"

	"github.com/compactrl/compactrl/report"
)

// runReport renders RUN_DIR/metrics.jsonl as RUN_DIR/report.html.
func runReport(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("report", "report RUN_DIR")
	fs.about = "Writes RUN_DIR/report.html (learning curves, summary quality, PPO diagnostics) from RUN_DIR/metrics.jsonl."
	fs.examples = []string{"compactrl report runs/demo"}
	fs.maxArgs = 1
	pos, err := fs.parse(e, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fs.usageErr("need a RUN_DIR")
	}
	path, err := report.Generate(pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, path)
	return nil
}
