// Package transcript renders an episode (episode.Episode, token ids) as
// readable text for people: turns decoded with the policy's tokenizer and
// labelled by the chat template's role markers, trained tokens marked, and
// each compaction with the facts its summary kept and lost. `compactrl
// show` prints it; training runs keep held-out excerpts for the report.
package transcript

import (
	"fmt"
	"io"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
)

// Write renders ep as readable text: every segment's prompt and
// response as turns, the policy's own tokens (loss mask 1) marked with *,
// each compaction marked with what the summary kept and lost of the facts
// seen (and, for a summary an evaluation override replaced, which
// override and the fact it dropped); with full false only the first and last lines of a long
// observation. Turn roles come from the template markers; the
// resumed prompt's re-included steps are labelled as such.
func Write(w io.Writer, ep *episode.Episode, tok agent.LocalTokenizer, tm agent.Template, full bool) {
	role := map[int]string{tm.System: "system", tm.User: "user", tm.Assistant: "assistant", tm.Observation: "observation", tm.Summary: "summary", -1: "text"}
	fmt.Fprintf(w, "episode %s  status %s  reward %g", ep.ID, ep.Status, ep.Reward)
	for _, k := range []string{agent.MetricTurns, agent.MetricCompactions, agent.MetricSummaryQuality, agent.MetricSampledTokens} {
		if v, ok := ep.Metrics[k]; ok {
			fmt.Fprintf(w, "  %s %g", k, v)
		}
	}
	fmt.Fprintln(w)
	for _, k := range []string{agent.MetaEndReason, agent.MetaError, agent.MetaSummaryOverride} {
		if v := ep.Meta[k]; v != "" {
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
	for i, s := range ep.Segments {
		trained := fmt.Sprintf("%d trained", sum(s.LossMask))
		if !s.Trainable {
			trained = fmt.Sprintf("%d policy tokens, segment not trainable", sum(s.LossMask))
		}
		fmt.Fprintf(w, "\n── segment %d · %s · prompt %d + response %d = %d tokens · %s ──\n",
			i+1, s.Kind, len(s.PromptIDs), len(s.ResponseIDs), len(s.PromptIDs)+len(s.ResponseIDs), trained)
		fmt.Fprintln(w, "prompt:")
		steps := 0
		for _, t := range tm.Split(s.PromptIDs) {
			name := role[t.Marker]
			if i > 0 && (t.Marker == tm.Assistant || t.Marker == tm.Observation) {
				name += " (re-included)"
				if t.Marker == tm.Assistant {
					steps++
				}
			}
			writeTurn(w, name, tok.Decode(t.IDs), full || t.Marker != tm.Observation)
		}
		if i > 0 {
			fmt.Fprintf(w, "  (resumed from the summary with %d re-included steps)\n", steps)
		}
		fmt.Fprintln(w, "response:")
		for _, t := range tm.Split(s.ResponseIDs) {
			trained := false
			for j := t.Start; j < t.Start+len(t.IDs) && j < len(s.LossMask); j++ {
				trained = trained || s.LossMask[j] == 1
			}
			name := role[t.Marker]
			if trained {
				name += "*"
			}
			if t.Marker == tm.User && s.Kind == episode.KindSummary {
				name += " (summary request)"
			}
			writeTurn(w, name, tok.Decode(t.IDs), full || t.Marker != tm.Observation)
		}
		if s.Kind == episode.KindSummary {
			n := fmt.Sprint(countSummaries(ep.Segments[:i+1]))
			line := "══ compaction " + n
			if q, ok := ep.Metrics["summary_"+n+"_quality"]; ok {
				line += fmt.Sprintf(" · summary quality %.3f", q)
			}
			if o := ep.Meta["summary_"+n+"_override"]; o != "" {
				line += " · summary replaced: " + o
				if d, ok := ep.Meta["summary_"+n+"_dropped"]; ok {
					line += " (dropped: " + orNone(d) + ")"
				}
			}
			if kept, ok := ep.Meta["summary_"+n+"_kept"]; ok {
				line += " · kept: " + orNone(kept) + " · lost: " + orNone(ep.Meta["summary_"+n+"_lost"])
			}
			fmt.Fprintln(w, line+" ══")
		}
	}
	if obs := ep.Meta[agent.MetaFinalObservation]; obs != "" {
		fmt.Fprintf(w, "\nfinal observation: %s\n", obs)
	}
}

func countSummaries(segs []episode.Segment) int {
	n := 0
	for _, s := range segs {
		if s.Kind == episode.KindSummary {
			n++
		}
	}
	return n
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// writeTurn prints one turn as "role │ line", continuation lines indented;
// with all false only the first and last 5 lines of a long turn are shown.
func writeTurn(w io.Writer, name, text string, all bool) {
	lines := strings.Split(text, "\n")
	if !all && len(lines) > 14 {
		cut := len(lines) - 10
		lines = append(append(lines[:5:5], fmt.Sprintf("… %d lines …", cut)), lines[len(lines)-5:]...)
	}
	for i, l := range lines {
		label := ""
		if i == 0 {
			label = name
		}
		fmt.Fprintf(w, "  %-26s │ %s\n", label, l)
	}
}

// WritePlain renders ep for a real model's chat template, whose turns are
// in the text itself: each segment's prompt and response decoded whole,
// the policy's own tokens (loss mask 1) between ⟦ and ⟧.
func WritePlain(w io.Writer, ep *episode.Episode, tok agent.LocalTokenizer) {
	fmt.Fprintf(w, "episode %s  status %s  reward %g\n", ep.ID, ep.Status, ep.Reward)
	for i, s := range ep.Segments {
		fmt.Fprintf(w, "\n── segment %d · %s · prompt %d + response %d tokens ──\n%s", i+1, s.Kind, len(s.PromptIDs), len(s.ResponseIDs), tok.Decode(s.PromptIDs))
		for j := 0; j < len(s.ResponseIDs); {
			k := j
			for k < len(s.ResponseIDs) && s.LossMask[k] == s.LossMask[j] {
				k++
			}
			text := tok.Decode(s.ResponseIDs[j:k])
			if s.LossMask[j] == 1 {
				text = "⟦" + text + "⟧"
			}
			fmt.Fprint(w, text)
			j = k
		}
		fmt.Fprintln(w)
	}
}
