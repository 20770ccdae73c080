package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/compactrl/compactrl/episode"
)

// runExportEpisodes writes the trainable segments of episode JSONL as one
// JSON record a line: each record is one segment (one context window,
// trained as one sequence). Episodes with status infra_error are never
// exported (masked); overlong ones only with -keep-overlong; segments with
// trainable false or no optimised token are left out.
//
// Field mapping, segment s of episode e (P = prompt_ids, Y = response_ids,
// M = loss_mask, all per-token arrays aligned with Y):
//
//	--format slime: the fields of slime's Sample (slime/utils/types.py:93-151
//	  at 624b824a), one object per segment, readable by Sample.from_dict
//	  (types.py:229-244):
//	  tokens = P ⊕ Y         response_length = |Y|  loss_mask = M
//	  rollout_log_probs = logprobs                  reward = e.reward
//	  rollout_id = the episode's number in the input (0, 1, …): an integer
//	               shared by the segments of one episode, as slime's
//	               per-rollout loss and step split need (slime/ray/rollout.py:647-700,
//	               slime/utils/dp_schedule.py:127-133)
//	  index = running record number                 group_index = order of first appearance of e.group (or e.id)
//	  status = "completed" (ok, format_error) | "truncated" (overlong)
//	  prompt = e.task        response = ""
//	  metadata = {episode_id, segment_index, num_segments, kind, advantages,
//	              returns, values}: for inspection only. slime's training
//	              data is a fixed key list without metadata
//	              (rollout.py:657-752, forwarded keys 786-804): it recomputes
//	              advantages and returns from its own critic, so the ones
//	              here never reach its loss. On-policy PPO must sample with
//	              the current weights anyway: train with `compactrl serve`
//	              and integrations/slime (docs/scale.md).
//
//	--format jsonl: our segment as stored (episode.Segment fields) plus
//	  episode_id, task, group, reward, status, segment_index.
//
//	--format verl is refused: verl recomputes advantages, returns, old
//	  log-probs and values and takes one output per agent loop, so no
//	  export can carry CompactionRL's segments or advantages into it.
func runExportEpisodes(ctx context.Context, e env, args []string) error {
	fs, o := newExportCmd()
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	conv, err := exportConverter(o.format)
	if err != nil {
		return err
	}
	var r io.Reader = e.stdin
	if o.in != "-" {
		f, err := os.Open(o.in)
		if err != nil {
			return fmt.Errorf("open episodes: %w", err)
		}
		defer f.Close()
		r = f
	}
	var w io.Writer = e.stdout
	var outFile *os.File
	if o.out != "-" {
		f, err := os.Create(o.out)
		if err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		outFile = f
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	c, err := o.export(ctx, episode.NewReader(r), bw, conv)
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write records: %w", err)
	}
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			return fmt.Errorf("close output: %w", err)
		}
	}
	fmt.Fprintf(e.stderr, "export %s: %d episodes read, %d left out (infra_error/overlong), %d segment records written\n", o.format, c.episodes, c.skipped, c.records)
	return nil
}

// exportOptions are the flags of `compactrl export` (episodes).
type exportOptions struct {
	format, in, out          string
	keepOverlong, allowNoAdv bool
}

func newExportCmd() (*cmdLine, *exportOptions) {
	fs := newCmdLine("export", "export --format slime|jsonl [--in episodes.jsonl] [--out segments.jsonl]",
		"export gguf --checkpoint DIR --out FILE.gguf   (a checkpoint for llama.cpp: compactrl export gguf -h)")
	fs.examples = []string{"compactrl export --format slime --in adv.jsonl --out slime.jsonl",
		"compactrl advantages < episodes.jsonl | compactrl export --format jsonl"}
	o := &exportOptions{}
	fs.StringVar(&o.format, "format", "", "record format: slime or jsonl")
	fs.StringVar(&o.in, "in", "-", "episode JSONL with advantages (- for stdin)")
	fs.StringVar(&o.out, "out", "-", "output JSONL (- for stdout)")
	fs.BoolVar(&o.keepOverlong, "keep-overlong", false, "export overlong episodes too (default: masked, left out)")
	fs.BoolVar(&o.allowNoAdv, "allow-missing-advantages", false, "export segments without advantages (default: an error, run compactrl advantages first)")
	return fs, o
}

// recordFunc converts segment s (number idx of the n exported) of ep.
type recordFunc func(x *exportState, ep *episode.Episode, s *episode.Segment, idx, n int) any

func exportConverter(format string) (recordFunc, error) {
	switch format {
	case "verl":
		return nil, errors.New("--format verl: removed: verl recomputes advantages, returns, old log-probs and values and takes one output per agent loop, so no export can carry CompactionRL's segments or advantages into it; to train a real model, run `compactrl serve` with slime and integrations/slime (docs/scale.md)")
	case "slime":
		return slimeRecord, nil
	case "jsonl":
		return plainRecord, nil
	}
	return nil, fmt.Errorf("--format %q: want slime or jsonl", format)
}

// exportCounts are what an export read, left out and wrote.
type exportCounts struct{ episodes, skipped, records int }

// export writes one record per exported segment of every episode rd
// reads that is not masked (infra_error; overlong unless kept).
func (o *exportOptions) export(ctx context.Context, rd *episode.Reader, w io.Writer, conv recordFunc) (exportCounts, error) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	x := &exportState{groups: map[string]int{}}
	var c exportCounts
	for {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		ep, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("read %s: %w", o.in, err)
		}
		x.episode = c.episodes
		c.episodes++
		if ep.Status == episode.StatusInfraError || (ep.Status == episode.StatusOverlong && !o.keepOverlong) {
			c.skipped++
			continue
		}
		keep, err := o.exported(&ep, rd.Line())
		if err != nil {
			return c, err
		}
		for _, i := range keep {
			if err := enc.Encode(conv(x, &ep, &ep.Segments[i], i, len(keep))); err != nil {
				return c, fmt.Errorf("write record: %w", err)
			}
			c.records++
			x.index++
		}
	}
}

// exported lists ep's trainable segments with an optimised token; one
// without advantages (unless allowed) or log-probs is an error naming the
// input line.
func (o *exportOptions) exported(ep *episode.Episode, line int) ([]int, error) {
	var keep []int
	for i := range ep.Segments {
		s := &ep.Segments[i]
		if !s.Trainable || s.NumOptimised() == 0 {
			continue
		}
		if len(s.Advantages) == 0 && !o.allowNoAdv {
			return nil, fmt.Errorf("read %s: line %d: episode %q segment %d has no advantages (run compactrl advantages first)", o.in, line, ep.ID, i)
		}
		if len(s.Logprobs) == 0 {
			return nil, fmt.Errorf("read %s: line %d: episode %q segment %d has no logprobs", o.in, line, ep.ID, i)
		}
		keep = append(keep, i)
	}
	return keep, nil
}

type exportState struct {
	groups  map[string]int // slime group_index by group key
	index   int            // running record number
	episode int            // the current episode's number in the input: slime's rollout_id
}

func groupKey(ep *episode.Episode) string {
	if ep.Group != "" {
		return ep.Group
	}
	return ep.ID
}

func concat(a, b []int) []int {
	return append(append(make([]int, 0, len(a)+len(b)), a...), b...)
}

func orEmpty(v []float64) []float64 {
	if v == nil {
		return []float64{}
	}
	return v
}

type slimeMeta struct {
	EpisodeID    string    `json:"episode_id"`
	SegmentIndex int       `json:"segment_index"`
	NumSegments  int       `json:"num_segments"`
	Kind         string    `json:"kind"`
	Advantages   []float64 `json:"advantages"`
	Returns      []float64 `json:"returns"`
	Values       []float64 `json:"values"`
}

type slimeRow struct {
	RolloutID       int       `json:"rollout_id"`
	GroupIndex      int       `json:"group_index"`
	Index           int       `json:"index"`
	Prompt          string    `json:"prompt"`
	Tokens          []int     `json:"tokens"`
	Response        string    `json:"response"`
	ResponseLength  int       `json:"response_length"`
	Reward          float64   `json:"reward"`
	LossMask        []int     `json:"loss_mask"`
	RolloutLogProbs []float64 `json:"rollout_log_probs"`
	Status          string    `json:"status"`
	Metadata        slimeMeta `json:"metadata"`
}

func slimeRecord(x *exportState, ep *episode.Episode, s *episode.Segment, idx, n int) any {
	key := groupKey(ep)
	g, ok := x.groups[key]
	if !ok {
		g = len(x.groups)
		x.groups[key] = g
	}
	status := "completed"
	if ep.Status == episode.StatusOverlong {
		status = "truncated"
	}
	return slimeRow{
		RolloutID: x.episode, GroupIndex: g, Index: x.index, Prompt: ep.Task,
		Tokens: concat(s.PromptIDs, s.ResponseIDs), ResponseLength: len(s.ResponseIDs),
		Reward: ep.Reward, LossMask: s.LossMask, RolloutLogProbs: s.Logprobs, Status: status,
		Metadata: slimeMeta{EpisodeID: ep.ID, SegmentIndex: idx, NumSegments: n, Kind: string(s.Kind),
			Advantages: orEmpty(s.Advantages), Returns: orEmpty(s.Returns), Values: orEmpty(s.Values)},
	}
}

type plainRow struct {
	EpisodeID    string  `json:"episode_id"`
	Task         string  `json:"task"`
	Group        string  `json:"group,omitempty"`
	Reward       float64 `json:"reward"`
	Status       string  `json:"status"`
	SegmentIndex int     `json:"segment_index"`
	episode.Segment
}

func plainRecord(_ *exportState, ep *episode.Episode, s *episode.Segment, idx, _ int) any {
	return plainRow{EpisodeID: ep.ID, Task: ep.Task, Group: ep.Group, Reward: ep.Reward,
		Status: string(ep.Status), SegmentIndex: idx, Segment: *s}
}
