package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/flagbind"
	"github.com/compactrl/compactrl/rl"
)

// runAdvantages is `compactrl advantages`: episode JSONL on stdin, the same
// episodes with every segment's advantages and returns on stdout
// (rl.AdvantagesJSONL). The flags are rl.AdvantageConfig's settings, derived
// from its tags (internal/flagbind); rl's Validate is their one check.
func runAdvantages(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("advantages", "advantages [flags] < episodes.jsonl > episodes-with-advantages.jsonl")
	fs.examples = []string{"compactrl advantages --estimator cross-gae < runs/x/episodes.jsonl > adv.jsonl",
		"compactrl advantages --estimator grpo --group-by-task < episodes.jsonl > adv.jsonl"}
	cfg := rl.DefaultAdvantageConfig()
	flagbind.Bind(fs.FlagSet, &cfg)
	fs.Lookup("estimator").Usage += ": one of " + strings.Join(rl.EstimatorNames(), ", ")
	unknown := fs.Bool("allow-unknown-fields", false, "ignore (and drop) JSON fields outside the episode schema instead of rejecting the line")
	fs.about = "Episodes come on stdin; the GAE estimators stream, grpo and dr-grpo hold all episodes (a group's members may be anywhere)."
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	r := episode.NewReader(e.stdin)
	r.AllowUnknownFields = *unknown
	w := episode.NewWriter(e.stdout)
	err := rl.AdvantagesJSONL(ctx, r, w, cfg)
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write: %w", ferr)
	}
	return err
}
