package episode

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// benchLines writes n episodes of 4 segments × 2,000 tokens with logprobs
// and values as JSONL.
func benchLines(b *testing.B, n int) []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for e := range n {
		ep := Episode{ID: "bench", Task: "t", Reward: 1, Status: StatusOK}
		for range 4 {
			s := Segment{Kind: KindExec, Trainable: true, PromptIDs: make([]int, 500), ResponseIDs: make([]int, 2000),
				LossMask: make([]int, 2000), Logprobs: make([]float64, 2000), Values: make([]float64, 2000)}
			for i := range 2000 {
				s.ResponseIDs[i] = (i * 7919) % 50000
				s.LossMask[i] = (i / 3) % 2
				s.Logprobs[i] = -float64((i*31+e)%1000) / 337
				s.Values[i] = float64(i%97) / 89
			}
			ep.Segments = append(ep.Segments, s)
		}
		if err := w.Write(&ep); err != nil {
			b.Fatal(err)
		}
	}
	w.Flush()
	return buf.Bytes()
}

// BenchmarkReader reports read throughput (MB/s) and ns per response token.
func BenchmarkReader(b *testing.B) {
	data := benchLines(b, 20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r := NewReader(bytes.NewReader(data))
		for {
			if _, err := r.Next(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(20*4*2000), "ns/token")
}

// BenchmarkWriter reports write throughput.
func BenchmarkWriter(b *testing.B) {
	data := benchLines(b, 20)
	var eps []Episode
	r := NewReader(bytes.NewReader(data))
	for {
		ep, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		eps = append(eps, ep)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		w := NewWriter(io.Discard)
		for i := range eps {
			if err := w.Write(&eps[i]); err != nil {
				b.Fatal(err)
			}
		}
		w.Flush()
	}
}
