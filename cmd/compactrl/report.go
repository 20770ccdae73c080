package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/report"
)

// runReport renders RUN_DIR/metrics.jsonl as RUN_DIR/report.html, or with
// --episodes tabulates episode JSONL files (held-out rollouts): pass@1
// with its Wilson interval, summary quality, compactions and summary
// overrides per file, and pass@1 by mean summary quality, plotted to --svg.
func runReport(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("report", "report RUN_DIR | report --episodes [--svg FILE] [NAME=]EPISODES.jsonl…")
	fs.about = "Writes RUN_DIR/report.html (learning curves, summary quality, PPO diagnostics) from RUN_DIR/metrics.jsonl; with --episodes, Markdown tables of episode JSONL files (pass@1 [95% Wilson], summary quality, compactions, overrides, pass@1 by mean summary quality) and an SVG plot of the last."
	fs.examples = []string{"compactrl report runs/demo",
		"compactrl report --episodes --svg runs/quality.svg base=runs/base-own.jsonl rl=runs/rl-own.jsonl"}
	episodes := fs.Bool("episodes", false, "the arguments are episode JSONL files, each optionally named NAME=FILE")
	svg := fs.String("svg", "", "with --episodes: write the plot of pass@1 by mean summary quality to this SVG file")
	title := fs.String("title", "pass@1 by mean summary quality (held-out episodes)", "with --episodes: the plot's title")
	fs.maxArgs = -1
	pos, err := fs.parse(e, args)
	if err != nil {
		return err
	}
	if *episodes {
		if len(pos) == 0 {
			return fs.usageErr("--episodes needs at least one episode JSONL file")
		}
		return reportEpisodes(e, pos, *svg, *title)
	}
	if *svg != "" {
		return fs.usageErr("--svg needs --episodes")
	}
	switch {
	case len(pos) == 0:
		return fs.usageErr("need a RUN_DIR")
	case len(pos) > 1:
		return fs.usageErr("unexpected arguments %q", pos[1:])
	}
	path, err := report.Generate(pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, path)
	return nil
}

// reportEpisodes is `report --episodes`.
func reportEpisodes(e env, files []string, svg, title string) error {
	var names []string
	var sets [][]episode.Episode
	for _, arg := range files {
		name, path, ok := strings.Cut(arg, "=")
		if !ok {
			name, path = strings.TrimSuffix(filepath.Base(arg), ".jsonl"), arg
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("report --episodes: %w", err)
		}
		eps, err := report.ReadEpisodes(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("report --episodes %s: %w", path, err)
		}
		names, sets = append(names, name), append(sets, eps)
	}
	series, err := report.WriteEpisodeTables(e.stdout, names, sets, report.DefaultQualityBins())
	if err != nil {
		return err
	}
	if svg != "" {
		if err := os.WriteFile(svg, []byte(report.QualitySVG(title, series)), 0o644); err != nil {
			return fmt.Errorf("--svg: %w", err)
		}
	}
	return nil
}
