package agent

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// ChatPreset is a real model's chat template as the text around each turn
// of the agent's conversation. The texts hold special-token strings
// ("<|im_start|>"), which NewChatFormat encodes as their ids. The built-in
// presets are data, one JSON file each under templates/ (embedded), written
// from each model's published chat template (Source): Go has no Jinja
// engine, so every template is a preset; a model's own preset is a file of
// the same fields (--chat-template FILE.json). TestPresetGolden renders
// each built-in on a fixed conversation against testdata/golden/, and the
// parity tests
// (TestChatTemplateParityWithJinja) render the agent's conversations with
// the model's own Jinja source (@huggingface/jinja) and the reference
// tokenizer and compare every policy call's context id for id (Qwen3,
// Llama 3, Llama 3.1, DeepSeek-V3, Gemma 3). GPT-OSS's package ships no
// chat_template and GLM has no package here, so those two (and ChatML) are
// checked as rendered text (TestPresetRenderings).
//
// Where the agent's incremental context cannot equal the template's
// rendering of the whole history, it keeps what was sampled, so that every
// sampled token is scored in the context it was sampled in
// (TestSampledTokensScoredInTheirContext):
//   - Qwen3 and GLM-4.5 re-render assistant turns: thinking (<think>…</think>)
//     is normalised, and dropped from turns before the last user message,
//     which the summary request is; GLM-4.5 also strips contents.
//   - GPT-OSS (harmony) re-renders a finished reply's <|return|> as <|end|>
//     and drops its analysis channel; the preset leaves out the template's
//     "Current date" line, so that renderings do not depend on the day.
//   - GLM-4.5's roles are its stop tokens: a sampled <|observation|> or
//     <|user|> is kept and the next turn continues after it.
//   - Llama 3 and Gemma 3 trim contents; a sampled action with surrounding
//     whitespace stays as sampled. Gemma 3's template refuses two user turns
//     in a row (an observation, then the summary request); the agent writes
//     them as two turns, and the parity test renders its template without
//     that check.
//   - Special-token strings inside a content stay text (the reference
//     would make them control tokens: an observation must not end a turn).
//   - DeepSeek-V3's tool turns need assistant tool_calls and its template
//     never resets its first-output flag, so observations are user turns.
type ChatPreset struct {
	Name   string `json:"name"`
	Source string `json:"source"` // the published template this preset follows

	// System is SystemOpen + s + SystemClose, or SystemEmpty when the
	// system prompt is empty. Each includes the conversation's start (BOS).
	SystemOpen  string `json:"system_open"`
	SystemClose string `json:"system_close"`
	SystemEmpty string `json:"system_empty"`
	// FirstUserOpen opens the user turn right after the system block
	// (Gemma 3 puts the system prompt inside that turn, so it is "").
	FirstUserOpen string `json:"first_user_open"`
	UserOpen      string `json:"user_open"`
	UserClose     string `json:"user_close"`
	// AssistantOpen opens an action or a summary (the generation prompt).
	// AssistantClose ends one that hit its token limit; AfterStop follows
	// a sampled stop token (Qwen's "\n" after <|im_end|>).
	AssistantOpen  string `json:"assistant_open"`
	AssistantClose string `json:"assistant_close"`
	AfterStop      string `json:"after_stop"`
	// Observations are rendered as ObservationRole's turns.
	ObservationRole  string `json:"observation_role"`
	ObservationOpen  string `json:"observation_open"`
	ObservationClose string `json:"observation_close"`
	// ResumeJoin separates the resume text and the summary inside the
	// resume turn (a user turn).
	ResumeJoin string   `json:"resume_join"`
	Stop       []string `json:"stop"`
	// OptionalStop are stop tokens used when the tokenizer has them (a
	// family's later releases added some, e.g. Llama 3.1's <|eom_id|>).
	OptionalStop []string `json:"optional_stop,omitempty"`
	// Trim: the template trims message contents (Jinja | trim).
	Trim bool `json:"trim"`
	// Detect says how DetectPreset recognises a model's own chat template
	// as this preset (absent: never picked by detection).
	Detect *Detection `json:"detect,omitempty"`
}

// Detection is how a preset is recognised from a model's
// tokenizer_config.json: its chat_template contains every All marker and,
// when Any or EOS are given, one Any marker or an eos token in EOS; or the
// model ships no chat_template and its tokenizer has the special token
// SpecialWithoutTemplate. Presets are tried by descending Priority (a
// preset that refines another's markers ranks above it), then by name.
type Detection struct {
	All                    []string `json:"all,omitempty"`
	Any                    []string `json:"any,omitempty"`
	EOS                    []string `json:"eos,omitempty"`
	SpecialWithoutTemplate string   `json:"special_without_template,omitempty"`
	Priority               int      `json:"priority"`
}

// matches reports whether d recognises template (with its eos token).
func (d *Detection) matches(template, eos string, hasSpecial func(string) bool) bool {
	if template == "" {
		return d.SpecialWithoutTemplate != "" && hasSpecial != nil && hasSpecial(d.SpecialWithoutTemplate)
	}
	if len(d.All) == 0 && len(d.Any) == 0 {
		return false
	}
	for _, m := range d.All {
		if !strings.Contains(template, m) {
			return false
		}
	}
	if len(d.Any) == 0 && len(d.EOS) == 0 {
		return true
	}
	return slices.ContainsFunc(d.Any, func(m string) bool { return strings.Contains(template, m) }) || slices.Contains(d.EOS, eos)
}

// The built-in presets, one file each under templates/: NAME.json holds
// ChatPreset's fields, the same format --chat-template FILE.json takes, so
// a built-in is also the starting point for a model's own preset.
// TestPresetGolden renders each on a fixed conversation against
// testdata/golden/NAME.txt.
//
//go:embed templates/*.json
var presetFiles embed.FS

// builtinPresets parses the embedded preset files once.
var builtinPresets = sync.OnceValue(func() map[string]ChatPreset {
	out, err := parsePresetFiles(presetFiles, "templates")
	if err != nil {
		panic("agent: embedded chat template: " + err.Error())
	}
	return out
})

// parsePresetFiles reads every NAME.json under dir of fsys as a preset;
// the file's name must be the preset's.
func parsePresetFiles(fsys fs.FS, dir string) (map[string]ChatPreset, error) {
	names, err := fs.Glob(fsys, dir+"/*.json")
	if err != nil {
		return nil, err
	}
	out := make(map[string]ChatPreset, len(names))
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		p, err := parsePreset(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		if want := strings.TrimSuffix(path.Base(n), ".json"); p.Name != want {
			return nil, fmt.Errorf("%s: preset named %q, want %q", n, p.Name, want)
		}
		out[p.Name] = p
	}
	return out, nil
}

// parsePreset decodes one preset file: ChatPreset's fields, no others.
func parsePreset(b []byte) (ChatPreset, error) {
	var p ChatPreset
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(&p)
	return p, err
}

// Presets are the built-in chat templates by name (templates/*.json). The
// map and the presets' slices are the caller's own.
func Presets() map[string]ChatPreset {
	out := make(map[string]ChatPreset, len(builtinPresets()))
	for k, p := range builtinPresets() {
		p.Stop = slices.Clone(p.Stop)
		p.OptionalStop = slices.Clone(p.OptionalStop)
		if p.Detect != nil {
			d := *p.Detect
			d.All, d.Any, d.EOS = slices.Clone(d.All), slices.Clone(d.Any), slices.Clone(d.EOS)
			p.Detect = &d
		}
		out[k] = p
	}
	return out
}

// PresetNames lists the presets' names, sorted.
func PresetNames() []string {
	var n []string
	for k := range Presets() {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// DetectPreset picks the preset of a tokenizer_config.json's chat_template
// (template) and eos token by the markers each preset's Detect names;
// hasSpecial reports whether the tokenizer has a special token (GPT-OSS
// ships no chat_template in tokenizer_config.json and is known by
// <|channel|>).
func DetectPreset(template, eos string, hasSpecial func(string) bool) (ChatPreset, error) {
	ps := Presets()
	names := PresetNames()
	slices.SortStableFunc(names, func(a, b string) int { return priority(ps[b]) - priority(ps[a]) })
	for _, n := range names {
		if d := ps[n].Detect; d != nil && d.matches(template, eos, hasSpecial) {
			return ps[n], nil
		}
	}
	if template == "" {
		return ChatPreset{}, errors.New("chat template: tokenizer_config.json has no chat_template; give --chat-template NAME (" + strings.Join(PresetNames(), ", ") + ")")
	}
	return ChatPreset{}, errors.New("chat template: tokenizer_config.json's chat_template matches no preset; give --chat-template NAME (" + strings.Join(PresetNames(), ", ") + ") or a preset .json file")
}

func priority(p ChatPreset) int {
	if p.Detect == nil {
		return 0
	}
	return p.Detect.Priority
}

// LoadPreset resolves --chat-template: a preset name, a preset .json file
// (ChatPreset's fields), or a Jinja file whose markers pick a preset.
func LoadPreset(spec string) (ChatPreset, error) {
	if p, ok := Presets()[spec]; ok {
		return p, nil
	}
	b, err := os.ReadFile(spec)
	if err != nil {
		return ChatPreset{}, fmt.Errorf("chat template %q: not a preset (%s) and not a readable file: %w", spec, strings.Join(PresetNames(), ", "), err)
	}
	if strings.EqualFold(filepath.Ext(spec), ".json") {
		p, err := parsePreset(b)
		if err != nil {
			return ChatPreset{}, fmt.Errorf("chat template %s: %w", spec, err)
		}
		if p.Name == "" {
			p.Name = filepath.Base(spec)
		}
		return p, nil
	}
	p, err := DetectPreset(string(b), "", nil)
	if err != nil {
		return ChatPreset{}, fmt.Errorf("chat template %s: %w", spec, err)
	}
	return p, nil
}

// ChatTokenizer is what a ChatFormat needs of the model's tokenizer, held
// in memory: LocalTokenizer for contents, the template's text with its special-token
// strings as ids, a special token's id, and the added tokens' contents
// (where the template's text has its fixed token boundaries).
type ChatTokenizer interface {
	LocalTokenizer
	EncodeWithSpecials(text string) []int
	SpecialID(content string) (int, bool)
	Specials() []string
}

// ChatFormat is a Format built from a ChatPreset and the model's tokenizer.
//
// A turn renders as the template renders it: open text ⊕ content ⊕ close
// text, encoded as one text, so that a content's last characters and the
// template's next ones ("." then "\n</tool_response>") form the tokens
// the model saw in training. Only the plain text between the template's
// added tokens is encoded jointly; the content keeps special-token strings
// as text (Encode), where the reference would make them control tokens.
// Sampled ids (actions, the summary) are never re-encoded.
type ChatFormat struct {
	preset                               ChatPreset
	tok                                  ChatTokenizer
	system, firstUser, user, obs         turnText
	asstOpen, asstClose, afterStop, join []int
	systemEmpty                          []int
	stop                                 []int
}

// turnText is a turn's open and close text split where the content's
// joint encoding starts and ends: openIDs ⊕ enc(openTail + content +
// closeHead) ⊕ closeIDs.
type turnText struct {
	openIDs, closeIDs   []int
	openTail, closeHead string
}

// NewChatFormat encodes the preset's texts with tok. Every stop string must
// be one special token.
func NewChatFormat(p ChatPreset, tok ChatTokenizer) (*ChatFormat, error) {
	if tok == nil {
		return nil, errors.New("chat template: a tokenizer is required")
	}
	if len(p.Stop) == 0 {
		return nil, fmt.Errorf("chat template %s: no stop token", p.Name)
	}
	if p.AssistantOpen == "" {
		return nil, fmt.Errorf("chat template %s: empty assistant_open", p.Name)
	}
	f := &ChatFormat{preset: p, tok: tok}
	added := tok.Specials()
	mk := func(open, close string) turnText {
		oi := lastAddedEnd(open, added)
		ci := firstAddedStart(close, added)
		return turnText{tok.EncodeWithSpecials(open[:oi]), tok.EncodeWithSpecials(close[ci:]), open[oi:], close[:ci]}
	}
	f.system = mk(p.SystemOpen, p.SystemClose)
	f.firstUser = mk(p.FirstUserOpen, p.UserClose)
	f.user = mk(p.UserOpen, p.UserClose)
	f.obs = mk(p.ObservationOpen, p.ObservationClose)
	e := tok.EncodeWithSpecials
	f.systemEmpty, f.asstOpen, f.asstClose, f.afterStop = e(p.SystemEmpty), e(p.AssistantOpen), e(p.AssistantClose), e(p.AfterStop)
	for _, s := range p.Stop {
		id, ok := tok.SpecialID(s)
		if !ok {
			return nil, fmt.Errorf("chat template %s: stop token %q is not a special token of this tokenizer", p.Name, s)
		}
		f.stop = append(f.stop, id)
	}
	for _, s := range p.OptionalStop {
		if id, ok := tok.SpecialID(s); ok {
			f.stop = append(f.stop, id)
		}
	}
	return f, nil
}

// lastAddedEnd is the end of the last added-token occurrence in s (0 if
// none), matching leftmost-longest as the tokenizer does.
func lastAddedEnd(s string, added []string) int {
	end := 0
	for i := 0; i < len(s); {
		n := 0
		for _, a := range added {
			if len(a) > n && strings.HasPrefix(s[i:], a) {
				n = len(a)
			}
		}
		if n > 0 {
			i += n
			end = i
			continue
		}
		i++
	}
	return end
}

// firstAddedStart is the start of the first added-token occurrence in s
// (len(s) if none).
func firstAddedStart(s string, added []string) int {
	for i := 0; i < len(s); i++ {
		for _, a := range added {
			if strings.HasPrefix(s[i:], a) {
				return i
			}
		}
	}
	return len(s)
}

// Preset returns the preset f was built from.
func (f *ChatFormat) Preset() ChatPreset { return f.preset }

func cat(parts ...[]int) []int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]int, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// render is a turn around content ids, the content re-joined with the
// template's adjacent text (see ChatFormat).
func (f *ChatFormat) render(t turnText, content []int, tail string) []int {
	text := t.openTail + f.tok.Decode(content) + tail
	if tail == "" {
		text += t.closeHead
	}
	var mid []int
	if text != "" {
		mid = f.tok.Encode(text)
	}
	if tail != "" {
		return cat(t.openIDs, mid)
	}
	return cat(t.openIDs, mid, t.closeIDs)
}

// System implements Format.
func (f *ChatFormat) System(content []int) []int {
	if len(content) == 0 {
		return slices.Clone(f.systemEmpty)
	}
	return f.render(f.system, content, "")
}

// Task implements Format.
func (f *ChatFormat) Task(content []int) []int { return f.render(f.firstUser, content, "") }

// Resume implements Format: one user turn, text ⊕ ResumeJoin ⊕ summary,
// the summary's sampled ids as they are.
func (f *ChatFormat) Resume(text, summary []int) []int {
	t := f.firstUser
	head := f.render(t, text, f.preset.ResumeJoin)
	if f.preset.ResumeJoin == "" {
		head = f.render(turnText{openIDs: t.openIDs, openTail: t.openTail}, text, "")
	}
	return cat(head, summary, f.tok.Encode(t.closeHead), t.closeIDs)
}

// Action implements Format.
func (f *ChatFormat) Action() []int { return slices.Clone(f.asstOpen) }

// Stop implements Format.
func (f *ChatFormat) Stop() []int { return slices.Clone(f.stop) }

// Close implements Format.
func (f *ChatFormat) Close(stopped bool) []int {
	if stopped {
		return slices.Clone(f.afterStop)
	}
	return slices.Clone(f.asstClose)
}

// Observation implements Format.
func (f *ChatFormat) Observation(content []int) []int { return f.render(f.obs, content, "") }

// SummaryRequest implements Format: a user turn, then the assistant opener.
func (f *ChatFormat) SummaryRequest(instruction []int) []int {
	return cat(f.render(f.user, instruction, ""), f.asstOpen)
}

// Content trims what the template would trim (all surrounding whitespace
// for templates that trim), and otherwise leading line breaks and trailing
// whitespace: the template's own text around a content often starts or
// ends with a line break, and a content's whitespace would merge with it
// into other tokens than the agent's separate encoding gives.
func (f *ChatFormat) Content(text string) string {
	if f.preset.Trim {
		return strings.TrimFunc(text, jsTrimSpace)
	}
	return strings.TrimLeft(strings.TrimRightFunc(text, jsTrimSpace), "\r\n")
}

// jsTrimSpace is the whitespace JS's String.prototype.trim removes (the
// Jinja renderer's | trim).
func jsTrimSpace(r rune) bool {
	return r == '\ufeff' || (unicode.IsSpace(r) && r != 0x85)
}

// Message is one chat message for Render: role system, user, assistant or
// tool (or the preset's ObservationRole).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Render returns the ids of a conversation as the agent lays it out: what
// the model sees (with the generation prompt when addGenerationPrompt). A
// system message may only come first; assistant messages are closed as
// history (AssistantClose).
func (f *ChatFormat) Render(msgs []Message, addGenerationPrompt bool) ([]int, error) {
	enc := func(s string) []int { return f.tok.Encode(f.Content(s)) }
	var out []int
	first := true
	for i, m := range msgs {
		switch {
		case m.Role == "system":
			if i != 0 {
				return nil, fmt.Errorf("message %d: a system message must come first", i)
			}
			out = append(out, f.System(enc(m.Content))...)
			continue
		case m.Role == "user":
			if first {
				out = append(out, f.Task(enc(m.Content))...)
			} else {
				out = append(out, f.render(f.user, enc(m.Content), "")...)
			}
		case m.Role == "assistant":
			out = append(out, cat(f.asstOpen, enc(m.Content), f.asstClose)...)
		case m.Role == "tool" || m.Role == f.preset.ObservationRole:
			out = append(out, f.Observation(enc(m.Content))...)
		default:
			return nil, fmt.Errorf("message %d: role %q (want system, user, assistant or tool)", i, m.Role)
		}
		if first && (len(msgs) == 0 || msgs[0].Role != "system") {
			out = append(f.System(nil), out...)
		}
		first = false
	}
	if len(msgs) == 0 {
		out = f.System(nil)
	}
	if addGenerationPrompt {
		out = append(out, f.asstOpen...)
	}
	return out, nil
}
