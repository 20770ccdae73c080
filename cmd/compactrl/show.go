package main

import (
	"context"
	"fmt"
	"github.com/compactrl/compactrl/policy"
	"io"
	"os"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/transcript"
)

// runShow prints a readable transcript of one episode of an episode JSONL
// file: every segment's prompt and response as turns, the policy's own
// tokens (loss mask 1) marked with *, each compaction marked with what the
// summary kept and lost of the facts seen. Without --episode it lists the
// file's episodes.
func runShow(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("show", "show FILE [--episode ID] [flags]")
	fs.about = "Without --episode, lists the file's episodes."
	fs.examples = []string{"compactrl show runs/rollout.jsonl", "compactrl show runs/rollout.jsonl --episode vault-1000000 --full"}
	fs.maxArgs = 1
	id := fs.String("episode", "", "episode ID to show (default: list the episodes)")
	tokPath := fs.String("tokenizer", "", "tokenizer.json the episodes were written with (default: that of the episode's suite, meta env, else vault's: its built-in BPE)")
	full := fs.Bool("full", false, "show every line of long turns and the whole re-included prompt")
	pos, err := fs.parse(e, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fs.usageErr("need an episode FILE")
	}
	file := pos[0]
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	r := episode.NewReader(f)
	if *id == "" {
		return listEpisodes(e.stdout, r, file)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ep, err := r.Next()
		if err == io.EOF {
			return fmt.Errorf("%s: no episode %q", file, *id)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if ep.ID != *id {
			continue
		}
		pol, err := policy.Tokenizer(*tokPath, "", episodeSuite(ep.Meta))
		if err != nil {
			return err
		}
		if name := ep.Meta["tokenizer"]; name != "" && name != pol.TokName && *tokPath == "" {
			fmt.Fprintf(e.stderr, "note: episode was written with tokenizer %s; decoding with %s (use --tokenizer)\n", name, pol.TokName)
		}
		transcript.Write(e.stdout, &ep, pol.Tok, pol.Tmpl, *full)
		return nil
	}
}

func listEpisodes(w io.Writer, r *episode.Reader, file string) error {
	fmt.Fprintf(w, "%-20s %-12s %6s %5s %5s %8s %7s\n", "id", "status", "reward", "turns", "comp", "quality", "tokens")
	for {
		ep, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		q := "-"
		if v, ok := ep.Metrics[agent.MetricSummaryQuality]; ok {
			q = fmt.Sprintf("%.3f", v)
		}
		fmt.Fprintf(w, "%-20s %-12s %6.2f %5.0f %5.0f %8s %7.0f\n", ep.ID, ep.Status, ep.Reward,
			ep.Metrics[agent.MetricTurns], ep.Metrics[agent.MetricCompactions], q, ep.Metrics[agent.MetricSampledTokens])
	}
}
