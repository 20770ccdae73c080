// Package splitmix is the splitmix64 mixer (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014) that derives the
// project's seeds: a 64-bit state advances by the odd constant Gamma and each
// output is finalize(state), a bijection with good avalanche.
//
// Data flow: a run seed and the indices that name one use of randomness
// (purpose, iteration, episode, policy call) go in; a non-negative int64
// seed comes out. Pair serves the agent's per-call sampling seeds, Chain the
// trainer's task, sample and shuffle seeds. They are different mixes of the
// same core and give different outputs; both are fixed, since changing
// either changes every recorded run.
package splitmix

// Gamma is splitmix64's state increment, ⌊2⁶⁴/φ⌋ rounded to odd.
const Gamma = 0x9E3779B97F4A7C15

// The finaliser's multipliers (Stafford's "Mix13" variant of MurmurHash3's
// fmix64, as splitmix64 uses it).
const (
	mul1 = 0xBF58476D1CE4E5B9
	mul2 = 0x94D049BB133111EB
)

// finalize is splitmix64's output function:
//
//	z ← (z ⊕ z≫30)·mul1;  z ← (z ⊕ z≫27)·mul2;  return z ⊕ z≫31
func finalize(z uint64) uint64 {
	z = (z ^ (z >> 30)) * mul1
	z = (z ^ (z >> 27)) * mul2
	return z ^ (z >> 31)
}

// Next advances a splitmix64 state and returns its next output:
// state ← state + Gamma; return finalize(state).
func Next(state *uint64) uint64 {
	*state += Gamma
	return finalize(*state)
}

// Pair mixes a seed and an index into a non-negative seed:
//
//	Pair(seed, i) = finalize(seed·Gamma + i) ≫ 1   (mod 2⁶⁴)
func Pair(seed, i int64) int64 {
	return int64(finalize(uint64(seed)*Gamma+uint64(i)) >> 1)
}

// Chain folds values into one non-negative seed, each through a splitmix64
// step:
//
//	h₀ = Gamma;  hⱼ = finalize((hⱼ₋₁ ⊕ vⱼ) + Gamma);  Chain(v₁…vₙ) = hₙ ≫ 1
func Chain(vals ...int64) int64 {
	h := uint64(Gamma)
	for _, v := range vals {
		h = finalize((h ^ uint64(v)) + Gamma)
	}
	return int64(h >> 1)
}
