// Package export turns episode JSONL into per-segment training records that
// other tools read: one JSON object a line, one per trainable segment (one
// context window, trained as one sequence).
//
// Data flow: an episode.Reader → Write, which leaves out episodes the
// masking rule masks (rl.Masked: infra_error and verifier_error, overlong
// unless kept) and segments that are not trainable or optimise no token →
// the Format's record for each kept segment → a JSON encoder.
//
// Field mapping, segment s of episode e (P = prompt_ids, Y = response_ids,
// M = loss_mask, all per-token arrays aligned with Y):
//
//	Slime: the fields of slime's Sample (slime/utils/types.py:93-151 at
//	  624b824a), one object per segment, readable by Sample.from_dict
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
//	              and integrations/slime.
//
//	JSONL: the segment as stored (episode.Segment fields) plus
//	  episode_id, task, group, reward, status, segment_index.
//
// verl is refused: verl recomputes advantages, returns, old log-probs and
// values and takes one output per agent loop, so no export can carry
// CompactionRL's segments or advantages into it.
package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rl"
)

// Format names a record layout.
type Format string

// The record layouts.
const (
	Slime Format = "slime"
	JSONL Format = "jsonl"
)

// ParseFormat reads a format name; verl is refused with the reason.
func ParseFormat(name string) (Format, error) {
	switch Format(name) {
	case Slime, JSONL:
		return Format(name), nil
	case "verl":
		return "", errors.New("verl: removed: verl recomputes advantages, returns, old log-probs and values and takes one output per agent loop, so no export can carry CompactionRL's segments or advantages into it; to train a real model, run `compactrl serve` with slime and integrations/slime (docs/scale.md)")
	}
	return "", fmt.Errorf("%q: want slime or jsonl", name)
}

// Options say what is exported.
type Options struct {
	Format       Format
	KeepOverlong bool   // export overlong episodes (masked by default)
	AllowNoAdv   bool   // export segments without advantages
	Source       string // the input's name, for errors
}

// Counts are what an export read, left out and wrote.
type Counts struct{ Episodes, Skipped, Records int }

// Write writes one record per exported segment of every episode rd reads
// that the masking rule keeps (rl.Masked with overlong masked unless
// o.KeepOverlong). A kept segment without advantages (unless allowed) or
// log-probs is an error naming the input line.
func Write(ctx context.Context, rd *episode.Reader, w io.Writer, o Options) (Counts, error) {
	var rec func(x *state, ep *episode.Episode, s *episode.Segment, idx, n int) any
	switch o.Format {
	case Slime:
		rec = slimeRecord
	case JSONL:
		rec = plainRecord
	default:
		return Counts{}, fmt.Errorf("export: unknown format %q", o.Format)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	x := &state{groups: map[string]int{}}
	var c Counts
	for {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		ep, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("read %s: %w", o.Source, err)
		}
		x.episode = c.Episodes
		c.Episodes++
		if rl.Masked(&ep, !o.KeepOverlong) {
			c.Skipped++
			continue
		}
		keep, err := o.exported(&ep, rd.Line())
		if err != nil {
			return c, err
		}
		for _, i := range keep {
			if err := enc.Encode(rec(x, &ep, &ep.Segments[i], i, len(keep))); err != nil {
				return c, fmt.Errorf("write record: %w", err)
			}
			c.Records++
			x.index++
		}
	}
}

// exported lists ep's trainable segments with an optimised token.
func (o Options) exported(ep *episode.Episode, line int) ([]int, error) {
	var keep []int
	for i := range ep.Segments {
		s := &ep.Segments[i]
		if !s.Trainable || s.NumOptimised() == 0 {
			continue
		}
		if len(s.Advantages) == 0 && !o.AllowNoAdv {
			return nil, fmt.Errorf("read %s: line %d: episode %q segment %d has no advantages (run compactrl advantages first)", o.Source, line, ep.ID, i)
		}
		if len(s.Logprobs) == 0 {
			return nil, fmt.Errorf("read %s: line %d: episode %q segment %d has no logprobs", o.Source, line, ep.ID, i)
		}
		keep = append(keep, i)
	}
	return keep, nil
}

type state struct {
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

func slimeRecord(x *state, ep *episode.Episode, s *episode.Segment, idx, n int) any {
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
	tokens := append(append(make([]int, 0, len(s.PromptIDs)+len(s.ResponseIDs)), s.PromptIDs...), s.ResponseIDs...)
	return slimeRow{
		RolloutID: x.episode, GroupIndex: g, Index: x.index, Prompt: ep.Task,
		Tokens: tokens, ResponseLength: len(s.ResponseIDs),
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

func plainRecord(_ *state, ep *episode.Episode, s *episode.Segment, idx, _ int) any {
	return plainRow{EpisodeID: ep.ID, Task: ep.Task, Group: ep.Group, Reward: ep.Reward,
		Status: string(ep.Status), SegmentIndex: idx, Segment: *s}
}
