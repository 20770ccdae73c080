package agent

// Format is how the loop lays an episode's turns out in tokens. The loop
// encodes every content (system prompt, task, observation, summary
// instruction, resume text) with its Tokenizer, after Content, and asks the
// Format for the ids around it; it never re-renders a turn once written, so
// every sampled token stays in the context it was sampled in.
//
// Two implementations: Template, the built-in model's six special ids, and
// ChatFormat, a real model's chat template (Qwen3, Llama 3, DeepSeek-V3,
// Gemma 3, GPT-OSS, ChatML, GLM-4.x) given as token ids.
//
// A segment's context is
//
//	System(s) ⊕ Task(u)            ⊕ steps        (first segment)
//	System(s) ⊕ Resume(r, S)       ⊕ last k steps (after a compaction)
//	step    = Action() a Close(stopped) ⊕ Observation(o)
//	compact = SummaryRequest(q) S             (S sampled, ends the segment)
//
// where a and S are sampled until one of Stop(). The lengths of the blocks
// with empty content are the overheads of the loop's token arithmetic
// (Budget), so a Format's blocks must grow by exactly the content's length.
type Format interface {
	// System opens every segment: the conversation's start and the system
	// prompt's turn (content may be empty).
	System(content []int) []int
	// Task is the task's user turn, directly after System.
	Task(content []int) []int
	// Resume is the turn that carries the summary after a compaction,
	// directly after System: text is the resume text, summary the ids the
	// policy sampled (its stop token removed).
	Resume(text, summary []int) []int
	// Action opens a sampled action.
	Action() []int
	// Stop is the stop ids of every sampling request.
	Stop() []int
	// Close ends a sampled action: after its stop token when stopped,
	// else (the action hit its token limit) in place of it.
	Close(stopped bool) []int
	// Observation is the environment's turn after an action.
	Observation(content []int) []int
	// SummaryRequest is q_sum: the request turn and the opener of the
	// summary the policy then samples.
	SummaryRequest(instruction []int) []int
	// Content prepares a content text for encoding (e.g. trims it where the
	// model's template trims).
	Content(text string) string
}

// Format returns the built-in layout of t as a Format.
func (t Template) Format() Format { return templateFormat{t} }

// templateFormat lays turns out with a Template's six special ids (the
// layout Template's doc shows).
type templateFormat struct{ t Template }

// System is [System] content [EndOfTurn].
func (f templateFormat) System(content []int) []int { return f.wrap(f.t.System, content) }

// Task is [User] content [EndOfTurn].
func (f templateFormat) Task(content []int) []int { return f.wrap(f.t.User, content) }

// Resume is [User] text [EndOfTurn] [Summary] summary [EndOfTurn].
func (f templateFormat) Resume(text, summary []int) []int {
	out := append(f.wrap(f.t.User, text), f.t.Summary)
	out = append(out, summary...)
	return append(out, f.t.EndOfTurn)
}

// Action is [Assistant].
func (f templateFormat) Action() []int { return []int{f.t.Assistant} }

// Stop is [EndOfTurn].
func (f templateFormat) Stop() []int { return []int{f.t.EndOfTurn} }

// Close is nothing after a sampled EndOfTurn, else [EndOfTurn].
func (f templateFormat) Close(stopped bool) []int {
	if stopped {
		return nil
	}
	return []int{f.t.EndOfTurn}
}

// Observation is [Observation] content [EndOfTurn].
func (f templateFormat) Observation(content []int) []int { return f.wrap(f.t.Observation, content) }

// SummaryRequest is [User] instruction [EndOfTurn] [Summary].
func (f templateFormat) SummaryRequest(instruction []int) []int {
	return append(f.wrap(f.t.User, instruction), f.t.Summary)
}

// Content returns text unchanged.
func (f templateFormat) Content(text string) string { return text }

func (f templateFormat) wrap(marker int, content []int) []int {
	out := make([]int, 0, len(content)+2)
	out = append(out, marker)
	out = append(out, content...)
	return append(out, f.t.EndOfTurn)
}
