package episode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sampleEpisode() Episode {
	return Episode{
		ID: "ep-1", Task: "t<&>1", Group: "g", Reward: 0.75, Status: StatusOK,
		Segments: []Segment{
			{Kind: KindExec, Trainable: true, PromptIDs: []int{1, 2}, ResponseIDs: []int{3, 4, 5},
				LossMask: []int{1, 0, 1}, Logprobs: []float64{-0.5, 0, -1.25}, Values: []float64{0.1, 0.2, 0.3}},
			{Kind: KindSummary, Trainable: false, PromptIDs: []int{7}, ResponseIDs: []int{8},
				LossMask: []int{1}, Advantages: []float64{0}, Returns: []float64{-0.0}},
		},
		Metrics: map[string]float64{"turns": 12},
		Meta:    map[string]string{"policy": "p0"},
	}
}

func readAll(t *testing.T, in string) ([]Episode, []error) {
	t.Helper()
	r := NewReader(strings.NewReader(in))
	var eps []Episode
	var errs []error
	for i := 0; i < 1000; i++ {
		ep, err := r.Next()
		if errors.Is(err, io.EOF) {
			return eps, errs
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		eps = append(eps, ep)
	}
	t.Fatal("reader did not reach EOF")
	return nil, nil
}

func TestRoundTrip(t *testing.T) {
	want := []Episode{sampleEpisode(), {ID: "empty", Task: "t", Status: StatusInfraError}}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i := range want {
		if err := w.Write(&want[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("wrote %d lines, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), `"t<&>1"`) {
		t.Errorf("HTML characters escaped: %s", buf.String())
	}
	got, errs := readAll(t, buf.String())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestReaderLinesAndBlank(t *testing.T) {
	line := `{"id":"a","task":"t","reward":1,"status":"ok","segments":[]}`
	in := "\n" + line + "\r\n   \n" + line // last line without newline, CRLF tolerated
	got, errs := readAll(t, in)
	if len(errs) != 0 || len(got) != 2 {
		t.Fatalf("got %d episodes, errors %v", len(got), errs)
	}
}

func TestReaderLongLine(t *testing.T) {
	// One episode of ~3 MiB on one line: far beyond bufio.Scanner's 64 KiB.
	n := 400000
	ep := Episode{ID: "long", Task: "t", Status: StatusOK, Segments: []Segment{{
		Kind: KindExec, Trainable: true, PromptIDs: []int{0},
		ResponseIDs: make([]int, n), LossMask: make([]int, n), Logprobs: make([]float64, n),
	}}}
	for i := range n {
		ep.Segments[0].ResponseIDs[i] = i
		ep.Segments[0].LossMask[i] = i % 2
		ep.Segments[0].Logprobs[i] = -float64(i) / 7
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Write(&ep); err != nil {
		t.Fatal(err)
	}
	w.Write(&ep)
	w.Flush()
	if buf.Len() < 3<<20 {
		t.Fatalf("line only %d bytes", buf.Len()/2)
	}
	got, errs := readAll(t, buf.String())
	if len(errs) != 0 || len(got) != 2 || !reflect.DeepEqual(got[1], ep) {
		t.Fatalf("long line: %d episodes, errors %v", len(got), errs)
	}

	r := NewReader(bytes.NewReader(buf.Bytes()))
	r.MaxLineBytes = 1000
	_, err := r.Next()
	if err == nil || !strings.Contains(err.Error(), "line 1: line longer than 1000 bytes") {
		t.Fatalf("MaxLineBytes: %v", err)
	}
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "line 2:") {
		t.Fatalf("second over-long line: %v", err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after over-long lines: %v, want EOF", err)
	}
}

func TestReaderErrors(t *testing.T) {
	seg := func(s string) string {
		return `{"id":"a","task":"t","reward":1,"status":"ok","segments":[` +
			`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1]},` + s + `]}`
	}
	okSeg := `{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1]}`
	cases := []struct{ line, want string }{
		{`{"id":"a",`, "line 2: unexpected EOF"},
		{`[1,2]`, "line 2: not a JSON object"},
		{`{"id":"a","task":"t","reward":1,"status":"ok","segments":[]} {}`, "line 2: trailing data"},
		{`{"id":"a","task":"t","reward":1,"status":"done","segments":[]}`, `line 2: status: unknown status "done"`},
		{`{"id":"a","task":"t","reward":1,"segments":[]}`, "line 2: status: missing"},
		{`{"id":"a","task":"t","status":"ok","segments":[]}`, "line 2: reward: missing"},
		{`{"id":"a","task":"t","reward":null,"status":"ok","segments":[]}`, "line 2: reward: null"},
		{`{"id":"a","task":"t","reward":"1","status":"ok","segments":[]}`, "line 2: reward: cannot use string as float64"},
		{`{"id":"a","task":"t","reward":1e999,"status":"ok","segments":[]}`, "line 2: reward: cannot use number 1e999"},
		{`{"id":"a","task":"t","reward":NaN,"status":"ok","segments":[]}`, "line 2: invalid character 'N'"},
		{`{"id":"a","task":"t","reward":1,"status":"ok"}`, "line 2: segments: missing"},
		{`{"task":"t","reward":1,"status":"ok","segments":[]}`, "line 2: id: missing"},
		{`{"id":"a","task":"t","reward":1,"status":"ok","segments":[],"extra":1}`, `line 2: json: unknown field "extra"`},
		{`{"id":"a","task":"t","reward":1,"status":"ok","segments":{}}`, "line 2: segments: not an array"},
		{`{"id":"a","task":"t","reward":1,"status":"ok","segments":[],"metrics":{"x":"y"}}`, "line 2: metrics: cannot use string"},
		{`{"id":"a","task":"t","reward":1,"status":"ok","segments":[],"metrics":{"x":null}}`, `line 2: metrics["x"]: null`},
		{`{"id":"a","task":"t","reward":1,"status":"ok","segments":[],"meta":{"x":null}}`, `line 2: meta["x"]: null`},
		{"{\"id\":\"a\xff\",\"task\":\"t\",\"reward\":1,\"status\":\"ok\",\"segments\":[]}", "line 2: invalid UTF-8"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,0,1]}`),
			"line 2: segments[1].loss_mask: length 3, want 2 (len(response_ids))"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,3]}`),
			"line 2: segments[1].loss_mask[1]: value 3, want 0 or 1"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"values":[1]}`),
			"line 2: segments[1].values: length 1, want 0 or 2"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"logprobs":[1,2,3]}`),
			"line 2: segments[1].logprobs: length 3, want 0 or 2"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"advantages":[1]}`),
			"line 2: segments[1].advantages: length 1"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"returns":[1,"x"]}`),
			"line 2: segments[1].returns[1]: not a number"},
		{seg(`{"kind":"tool","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1]}`),
			`line 2: segments[1].kind: unknown kind "tool"`},
		{seg(`{"kind":"exec","prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1]}`),
			"line 2: segments[1].trainable: missing"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3]}`),
			"line 2: segments[1].loss_mask: missing"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,-3],"loss_mask":[1,1]}`),
			"line 2: segments[1].response_ids[1]: negative token id -3"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1.5],"response_ids":[2,3],"loss_mask":[1,1]}`),
			"line 2: segments[1].prompt_ids[0]: cannot use number 1.5 as int"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"values":[1,null]}`),
			"line 2: segments[1].values[1]: not a number"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"values":[1,1e999]}`),
			"line 2: segments[1].values[1]: cannot use number 1e999 as float64"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,99999999999999999999],"loss_mask":[1,1]}`),
			"line 2: segments[1].response_ids[1]: cannot use number 99999999999999999999 as int"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,[3]],"loss_mask":[1,1]}`),
			"line 2: segments[1].response_ids[1]: not a number"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":"11"}`),
			"line 2: segments[1].loss_mask: not an array"},
		{seg(`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,1],"vals":[]}`),
			`line 2: segments[1]: json: unknown field "vals"`},
		{seg(`7`), "line 2: segments[1]: not a JSON object"},
	}
	good := `{"id":"a","task":"t","reward":1,"status":"ok","segments":[` + okSeg + `]}`
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.want, "line 2: "), func(t *testing.T) {
			got, errs := readAll(t, good+"\n"+c.line+"\n"+good+"\n")
			if len(got) != 2 {
				t.Errorf("%s: %d valid episodes read, want 2 (valid lines must never be dropped)", c.line, len(got))
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
				t.Fatalf("%s:\n got errors %v\nwant one containing %q", c.line, errs, c.want)
			}
			var le *LineError
			if !errors.As(errs[0], &le) || le.Line != 2 {
				t.Errorf("%s: error %v is not a *LineError for line 2", c.line, errs[0])
			}
		})
	}
}

func TestReaderNullArraysAndUnknownAllowed(t *testing.T) {
	in := `{"id":"a","task":"t","reward":1,"status":"ok","segments":[{"kind":"exec","trainable":false,` +
		`"prompt_ids":null,"response_ids":null,"loss_mask":null,"values":null}],"x":1}`
	r := NewReader(strings.NewReader(in))
	r.AllowUnknownFields = true
	ep, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Segments) != 1 || ep.Segments[0].ResponseIDs != nil || ep.Segments[0].Values != nil {
		t.Fatalf("got %+v", ep)
	}
}

func TestWriterRejectsInvalid(t *testing.T) {
	for _, mutate := range []func(*Episode){
		func(e *Episode) { e.Reward = math.NaN() },
		func(e *Episode) { e.Segments[0].Values[1] = math.Inf(1) },
		func(e *Episode) { e.Segments[0].LossMask[0] = 2 },
		func(e *Episode) { e.Status = "" },
		func(e *Episode) { e.Metrics["q"] = math.Inf(-1) },
	} {
		ep := sampleEpisode()
		mutate(&ep)
		var buf bytes.Buffer
		w := NewWriter(&buf)
		if err := w.Write(&ep); err == nil {
			t.Errorf("Write accepted invalid episode %+v", ep)
		}
		w.Flush()
		if buf.Len() != 0 {
			t.Errorf("invalid episode written: %s", buf.String())
		}
	}
}

func TestNumOptimised(t *testing.T) {
	ep := sampleEpisode()
	if got := ep.NumOptimised(); got != 2 {
		t.Errorf("Episode.NumOptimised = %d, want 2 (non-trainable segment excluded)", got)
	}
	if got := ep.Segments[1].NumOptimised(); got != 1 {
		t.Errorf("Segment.NumOptimised = %d, want 1", got)
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	ep := sampleEpisode()
	w.Write(&ep)
	w.Flush()
	f.Add(buf.Bytes())
	f.Add([]byte(`{"id":"a","task":"t","reward":1,"status":"ok","segments":[{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[2,3],"loss_mask":[1,3]}]}`))
	f.Add([]byte("{\"id\":\"a\",\n\n{}\n[]\nnull\n\"segments\"\n{\"segments\":[null,{}]}"))
	f.Add([]byte(`{"id":"","task":"","reward":-0,"status":"overlong","segments":null,"metrics":{},"meta":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		r.MaxLineBytes = 1 << 16
		var got []Episode
		for range bytes.Count(data, []byte("\n")) + 2 {
			ep, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				var le *LineError
				if !errors.As(err, &le) {
					t.Fatalf("error %v is not a *LineError", err)
				}
				continue
			}
			got = append(got, ep)
		}
		// The fast and the slow decoding paths agree on every line.
		slow := NewReader(bytes.NewReader(data))
		slow.MaxLineBytes, slow.slowOnly = 1<<16, true
		fast := NewReader(bytes.NewReader(data))
		fast.MaxLineBytes = 1 << 16
		for {
			a, errA := fast.Next()
			b, errB := slow.Next()
			if fmt.Sprint(errA) != fmt.Sprint(errB) || !reflect.DeepEqual(a, b) {
				t.Fatalf("fast path %+v, %v; slow path %+v, %v", a, errA, b, errB)
			}
			if errors.Is(errA, io.EOF) {
				break
			}
		}
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("reader not at EOF after %d lines: %v", bytes.Count(data, []byte("\n"))+1, err)
		}
		// Every episode read must survive a write/read round trip unchanged.
		var out bytes.Buffer
		w := NewWriter(&out)
		for i := range got {
			if err := w.Write(&got[i]); err != nil {
				t.Fatalf("Write of an episode the Reader accepted: %v", err)
			}
		}
		w.Flush()
		r2 := NewReader(&out)
		for i := range got {
			ep, err := r2.Next()
			if err != nil {
				t.Fatalf("re-read episode %d: %v", i, err)
			}
			if !reflect.DeepEqual(ep, got[i]) {
				t.Fatalf("round trip changed episode %d:\n got %+v\nwant %+v", i, ep, got[i])
			}
		}
	})
}

// A Writer refuses a line longer than its bound (default
// DefaultMaxLineBytes, the Reader's) with an error naming the episode and
// writes nothing; the next episode is written. Before, any size was
// written (a 200 MB task text made a 200 MB line).
func TestWriterLineLimit(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.MaxLineBytes = 1000
	big := sampleEpisode()
	big.ID, big.Task = "big", strings.Repeat("x", 2000)
	err := w.Write(&big)
	if err == nil || !strings.Contains(err.Error(), `"big"`) || !strings.Contains(err.Error(), "1000-byte limit") {
		t.Fatalf("over-long episode: %v", err)
	}
	small := sampleEpisode()
	if err := w.Write(&small); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	got, errs := readAll(t, buf.String())
	if len(errs) != 0 || len(got) != 1 || got[0].ID != "ep-1" {
		t.Fatalf("after the refused line: %d episodes %v", len(got), errs)
	}
	if DefaultMaxLineBytes > 256<<20 {
		t.Fatalf("DefaultMaxLineBytes %d", DefaultMaxLineBytes)
	}
}
