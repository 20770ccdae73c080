package episode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/compactrl/compactrl/internal/field"
)

// DefaultMaxLineBytes bounds one JSONL line (one episode) unless
// Reader.MaxLineBytes or Writer.MaxLineBytes says otherwise, for reading
// and writing alike (a Writer never writes a line a Reader rejects).
// Long-horizon episodes can be several MiB a line (every segment's prompt
// ids, per-token log-probs, values, advantages, returns); the bound keeps
// a corrupt stream, or an episode that carries a giant task text or
// observation, from exhausting memory and disk.
const DefaultMaxLineBytes = 256 << 20

// LineError is a failure to read one line of episode JSONL. Field is the
// path inside the episode ("segments[2].loss_mask[5]") when known.
type LineError struct {
	Line  int
	Field string
	Err   error
}

func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: %s: %v", e.Line, e.Field, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Reader reads episodes from JSONL, one episode a line, streaming: memory
// holds one line at a time. Blank lines are skipped (they still count for
// line numbers). A bad line gives a *LineError; the next call to Next goes
// on with the following line, so a caller may report and continue or stop.
//
// Decoding is strict: the line must be one JSON object, valid UTF-8, with
// no unknown fields (unless AllowUnknownFields), and with the required
// fields present: id, task, reward, status, segments, and in every segment
// kind, trainable, prompt_ids, response_ids, loss_mask. Arrays may be null
// (read as empty); scalars may not. The episode must then pass
// Episode.Validate. Empty slices and maps are returned as nil.
type Reader struct {
	// MaxLineBytes bounds a line; 0 means DefaultMaxLineBytes.
	MaxLineBytes int
	// AllowUnknownFields makes the reader ignore fields outside the schema
	// instead of rejecting the line.
	AllowUnknownFields bool

	// slowOnly disables the fast path (tests compare the two).
	slowOnly bool

	r    *bufio.Reader
	line int
	buf  []byte
	eof  bool
}

// NewReader returns a Reader reading from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 1<<16)}
}

// Line returns the number of the line last read (1-based).
func (r *Reader) Line() int { return r.line }

// Next returns the next episode, or io.EOF after the last one.
func (r *Reader) Next() (Episode, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return Episode{}, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ep, err := r.decode(line)
		if err != nil {
			var fe *field.Error
			if errors.As(err, &fe) {
				return Episode{}, &LineError{Line: r.line, Field: fe.Path, Err: errors.New(fe.Msg)}
			}
			return Episode{}, &LineError{Line: r.line, Err: err}
		}
		return ep, nil
	}
}

// readLine returns the next line without its newline; the slice is valid
// until the next call.
func (r *Reader) readLine() ([]byte, error) {
	if r.eof {
		return nil, io.EOF
	}
	max := r.MaxLineBytes
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	r.line++
	r.buf = r.buf[:0]
	tooLong := false
	for {
		chunk, err := r.r.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(chunk) > max+1 { // +1: the newline
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, &LineError{Line: r.line, Err: fmt.Errorf("line longer than %d bytes", max)}
			}
			return r.buf[:len(r.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			r.eof = true
			if tooLong {
				return nil, &LineError{Line: r.line, Err: fmt.Errorf("line longer than %d bytes", max)}
			}
			if len(r.buf) == 0 {
				r.line--
				return nil, io.EOF
			}
			return r.buf, nil
		default:
			r.eof = true
			return nil, fmt.Errorf("line %d: read: %w", r.line, err)
		}
	}
}

type rawEpisode struct {
	ID       json.RawMessage `json:"id"`
	Task     json.RawMessage `json:"task"`
	Group    json.RawMessage `json:"group"`
	Reward   json.RawMessage `json:"reward"`
	Status   json.RawMessage `json:"status"`
	Segments json.RawMessage `json:"segments"`
	Metrics  json.RawMessage `json:"metrics"`
	Meta     json.RawMessage `json:"meta"`
}

type rawEpisodeFast struct {
	rawEpisode
	Segments []rawSegment `json:"segments"`
}

type rawSegment struct {
	Kind        json.RawMessage `json:"kind"`
	Trainable   json.RawMessage `json:"trainable"`
	PromptIDs   json.RawMessage `json:"prompt_ids"`
	ResponseIDs json.RawMessage `json:"response_ids"`
	LossMask    json.RawMessage `json:"loss_mask"`
	Logprobs    json.RawMessage `json:"logprobs"`
	Values      json.RawMessage `json:"values"`
	Advantages  json.RawMessage `json:"advantages"`
	Returns     json.RawMessage `json:"returns"`
}

func (r *Reader) decodeObject(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if !r.AllowUnknownFields {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func (r *Reader) decode(line []byte) (Episode, error) {
	if !utf8.Valid(line) {
		return Episode{}, errors.New("invalid UTF-8")
	}
	if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '{' {
		return Episode{}, errors.New("not a JSON object")
	}
	// Fast path: one decoder pass splits the line down to the segments'
	// fields. Any failure, and a missing or null segments array, goes the
	// slow way, which decodes segment by segment so that errors name the
	// segment (and is authoritative).
	var fast rawEpisodeFast
	if err := r.decodeObject(line, &fast); err == nil && fast.Segments != nil && !r.slowOnly {
		return r.convert(&fast.rawEpisode, fast.Segments, nil)
	}
	var raw rawEpisode
	if err := r.decodeObject(line, &raw); err != nil {
		return Episode{}, err
	}
	return r.convert(&raw, nil, raw.Segments)
}

// convert turns the raw fields into an Episode; the segments come either
// split (segs) or still encoded (rawSegs, then raw.Segments).
func (r *Reader) convert(raw *rawEpisode, segs []rawSegment, rawSegs json.RawMessage) (Episode, error) {
	var ep Episode
	if err := scalar(raw.ID, "id", &ep.ID); err != nil {
		return Episode{}, err
	}
	if err := scalar(raw.Task, "task", &ep.Task); err != nil {
		return Episode{}, err
	}
	if raw.Group != nil {
		if err := scalar(raw.Group, "group", &ep.Group); err != nil {
			return Episode{}, err
		}
	}
	if err := scalar(raw.Reward, "reward", &ep.Reward); err != nil {
		return Episode{}, err
	}
	if err := scalar(raw.Status, "status", &ep.Status); err != nil {
		return Episode{}, err
	}
	var encoded []json.RawMessage
	if segs == nil {
		if err := array(rawSegs, "segments", true, &encoded); err != nil {
			return Episode{}, err
		}
		segs = make([]rawSegment, len(encoded))
		for i, data := range encoded {
			if err := r.splitSegment(data, fmt.Sprintf("segments[%d]", i), &segs[i]); err != nil {
				return Episode{}, err
			}
		}
	}
	if err := object(raw.Metrics, "metrics", &ep.Metrics); err != nil {
		return Episode{}, err
	}
	if err := object(raw.Meta, "meta", &ep.Meta); err != nil {
		return Episode{}, err
	}
	if len(segs) > 0 {
		ep.Segments = make([]Segment, len(segs))
	}
	for i := range segs {
		if err := decodeSegment(&segs[i], fmt.Sprintf("segments[%d]", i), &ep.Segments[i]); err != nil {
			return Episode{}, err
		}
	}
	if err := ep.Validate(); err != nil {
		return Episode{}, err
	}
	return ep, nil
}

func (r *Reader) splitSegment(data []byte, path string, raw *rawSegment) error {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return field.Errorf(path, "not a JSON object")
	}
	if err := r.decodeObject(data, raw); err != nil {
		return field.Errorf(path, "%v", err)
	}
	return nil
}

func decodeSegment(raw *rawSegment, path string, s *Segment) error {
	if err := scalar(raw.Kind, path+".kind", &s.Kind); err != nil {
		return err
	}
	if err := scalar(raw.Trainable, path+".trainable", &s.Trainable); err != nil {
		return err
	}
	for _, f := range []struct {
		name     string
		raw      json.RawMessage
		dst      *[]int
		required bool
	}{
		{"prompt_ids", raw.PromptIDs, &s.PromptIDs, true},
		{"response_ids", raw.ResponseIDs, &s.ResponseIDs, true},
		{"loss_mask", raw.LossMask, &s.LossMask, true},
	} {
		if err := numbers(f.raw, field.Key(path, f.name), f.required, f.dst, parseInts); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *[]float64
	}{
		{"logprobs", raw.Logprobs, &s.Logprobs},
		{"values", raw.Values, &s.Values},
		{"advantages", raw.Advantages, &s.Advantages},
		{"returns", raw.Returns, &s.Returns},
	} {
		if err := numbers(f.raw, field.Key(path, f.name), false, f.dst, parseFloats); err != nil {
			return err
		}
	}
	return nil
}

// numbers decodes a per-token array field with parse; null reads as empty.
func numbers[T any](raw json.RawMessage, path string, required bool, dst *[]T, parse func([]byte, string, *[]T) error) error {
	if raw == nil {
		if required {
			return field.Errorf(path, "missing")
		}
		return nil
	}
	if bytes.Equal(raw, null) {
		return nil
	}
	return parse(raw, path, dst)
}

var null = []byte("null")

// scalar decodes a required, non-null scalar field.
func scalar[T any](raw json.RawMessage, path string, dst *T) error {
	if raw == nil {
		return field.Errorf(path, "missing")
	}
	if bytes.Equal(raw, null) {
		return field.Errorf(path, "null, want a value")
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return field.Errorf(path, "%v", typeErr(err))
	}
	return nil
}

// array decodes an array field; null reads as empty, and an empty result
// is stored as nil.
func array[T any](raw json.RawMessage, path string, required bool, dst *[]T) error {
	if raw == nil {
		if required {
			return field.Errorf(path, "missing")
		}
		return nil
	}
	if bytes.Equal(raw, null) {
		return nil
	}
	if raw[0] != '[' {
		return field.Errorf(path, "not an array")
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return field.Errorf(path, "%v", typeErr(err))
	}
	if len(*dst) == 0 {
		*dst = nil
	}
	return nil
}

// object decodes an optional JSON object of non-null values; an empty
// result is stored as nil.
func object[T any](raw json.RawMessage, path string, dst *map[string]T) error {
	if raw == nil || bytes.Equal(raw, null) {
		return nil
	}
	if raw[0] != '{' {
		return field.Errorf(path, "not an object")
	}
	var m map[string]*T
	if err := json.Unmarshal(raw, &m); err != nil {
		return field.Errorf(path, "%v", typeErr(err))
	}
	if len(m) == 0 {
		return nil
	}
	*dst = make(map[string]T, len(m))
	for k, v := range m {
		if v == nil {
			return field.Errorf(field.MapKey(path, k), "null, want a value")
		}
		(*dst)[k] = *v
	}
	return nil
}

// typeErr rewords encoding/json's type errors without Go type names'
// struct-field context, which is meaningless to a JSONL author.
func typeErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("cannot use %s as %s", te.Value, te.Type)
	}
	return err
}

// Writer writes episodes as JSONL, one episode a line. Every episode is
// validated first, so a Writer never writes a line a Reader rejects.
// Call Flush when done.
type Writer struct {
	// MaxLineBytes bounds a line (without its newline); 0 means
	// DefaultMaxLineBytes. A longer episode is an error naming it and
	// nothing is written.
	MaxLineBytes int

	w   *bufio.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer {
	wr := &Writer{w: bufio.NewWriterSize(w, 1<<16)}
	wr.enc = json.NewEncoder(&wr.buf)
	wr.enc.SetEscapeHTML(false)
	return wr
}

// Write writes one episode as one line.
func (w *Writer) Write(ep *Episode) error {
	if err := ep.Validate(); err != nil {
		return fmt.Errorf("write episode %q: %w", ep.ID, err)
	}
	out := *ep
	if out.Segments == nil {
		out.Segments = []Segment{}
	}
	normalised := false
	for i := range out.Segments {
		s := &out.Segments[i]
		if s.PromptIDs == nil || s.ResponseIDs == nil || s.LossMask == nil {
			if !normalised {
				out.Segments = append([]Segment(nil), out.Segments...)
				normalised = true
				s = &out.Segments[i]
			}
			if s.PromptIDs == nil {
				s.PromptIDs = []int{}
			}
			if s.ResponseIDs == nil {
				s.ResponseIDs = []int{}
			}
			if s.LossMask == nil {
				s.LossMask = []int{}
			}
		}
	}
	w.buf.Reset()
	if err := w.enc.Encode(&out); err != nil {
		return fmt.Errorf("write episode %q: %w", ep.ID, err)
	}
	max := w.MaxLineBytes
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	if n := w.buf.Len() - 1; n > max {
		w.buf.Reset()
		return fmt.Errorf("write episode %q: line of %d bytes is longer than the %d-byte limit (episode.DefaultMaxLineBytes / Writer.MaxLineBytes)", ep.ID, n, max)
	}
	if _, err := w.w.Write(w.buf.Bytes()); err != nil {
		return fmt.Errorf("write episode %q: %w", ep.ID, err)
	}
	return nil
}

// Flush writes buffered lines to the underlying writer.
func (w *Writer) Flush() error { return w.w.Flush() }
