package rl

import (
	"math/rand/v2"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// benchEpisodes makes n episodes of k trainable segments of t tokens,
// about 1 in 8 tokens mask 0.
func benchEpisodes(n, k, t int) []episode.Episode {
	rng := rand.New(rand.NewPCG(1, 1))
	eps := make([]episode.Episode, n)
	for i := range eps {
		ep := episode.Episode{ID: "b", Task: "t", Reward: rng.Float64(), Status: episode.StatusOK}
		for range k {
			s := episode.Segment{Kind: episode.KindExec, Trainable: true, ResponseIDs: make([]int, t),
				LossMask: make([]int, t), Values: make([]float64, t)}
			for j := range t {
				if rng.IntN(8) != 0 {
					s.LossMask[j] = 1
				}
				s.Values[j] = rng.Float64()
			}
			ep.Segments = append(ep.Segments, s)
		}
		eps[i] = ep
	}
	return eps
}

// BenchmarkCrossGAE: advantages for 1,000 episodes × 4 segments × 2,000
// tokens per iteration; reports ns per token (all response tokens).
func BenchmarkCrossGAE(b *testing.B) {
	const n, k, t = 1000, 4, 2000
	eps := benchEpisodes(n, k, t)
	cfg := DefaultAdvantageConfig()
	if err := ComputeAdvantages(eps, cfg); err != nil { // sizes the outputs
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := ComputeAdvantages(eps, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n*k*t), "ns/token")
}
