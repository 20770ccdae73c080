// Package model is the built-in policy and value network: a Llama decoder
// (Hugging Face LlamaForCausalLM semantics, float32) with a hand-written
// backward pass, and a critic that shares the trunk and ends in a scalar
// head (score.weight).
//
// Data flows as follows. Training and PPO scoring pack a batch of
// variable-length sequences into one [N, Dim] activation matrix (no
// padding): every projection is one GEMM over all N positions, attention
// runs per (sequence, head) as blocked GEMMs. The forward's GEMMs are
// kernel's batch-invariant ones (GemmRows), whose rows do not depend on N.
// A Scorer keeps the activations of its last Forward so that Backward can
// turn dL/d(output) — per-target log-probabilities for the policy,
// per-target values for the critic — into parameter gradients, accumulated
// in Param.Grad (Score is the lighter forward for rollouts that need no
// gradient). Sampling uses a KV cache per sequence: a Decoder batches the
// prefill of new prompts and one decode step of every running sequence
// into a single forward, and can keep finished sequences' caches so that a
// prompt extending an earlier one skips the shared prefix; computing every
// row as the Scorer does, it gives each sequence the same numbers whatever
// its batch, and the Scorer's. Checkpoints are config.json +
// model.safetensors with HF names (Save, Load). Optimisation is not this
// package's job: train/builtin hands Params to package optim.
package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/compactrl/compactrl/format"
)

// Param is one named parameter tensor, with Hugging Face naming and shape
// (linear weights are [out, in], row-major).
type Param struct {
	Name  string
	Shape []int
	Data  []float32
	Grad  []float32 // allocated by the first Backward (or EnsureGrads)
}

// Layer holds the weights of one decoder block.
type Layer struct {
	AttnNorm, Wq, Wk, Wv, Wo, MLPNorm, Wg, Wu, Wd *Param
}

// Model is a Llama decoder. With Value set it is a critic: the language
// model head is replaced by score.weight [1, Dim], giving one value per
// position.
type Model struct {
	Cfg   Config
	Value bool
	// BF16 runs the products of the linear layers and the head in
	// bfloat16 (kernel.GemmBF16: inputs rounded, float32 sums) in
	// training, scoring and decoding alike; the weights, their gradients,
	// norms, attention and the optimiser stay float32. Set it before
	// building a Decoder.
	BF16   bool
	Embed  *Param
	Layers []Layer
	Norm   *Param
	LMHead *Param // nil when Cfg.TiedEmbeddings or Value
	Score  *Param // critic head; nil unless Value

	params   []*Param
	cos, sin []float32 // RoPE tables [MaxSeq][HeadDim/2]
}

func newParam(name string, shape ...int) *Param {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return &Param{Name: name, Shape: shape, Data: make([]float32, n)}
}

// alloc builds the parameter set of cfg with zero weights.
func alloc(cfg Config, value bool) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if need := cfg.MemoryBytes(); need > format.MaxModelBytes {
		return nil, fmt.Errorf("model config: %.1f GiB of weights is above the memory ceiling of %.1f GiB (format.MaxModelBytes)", float64(need)/(1<<30), float64(format.MaxModelBytes)/(1<<30))
	}
	d, hd := cfg.Dim, cfg.HeadDim()
	m := &Model{Cfg: cfg, Value: value}
	m.Embed = newParam("model.embed_tokens.weight", cfg.Vocab, d)
	m.params = append(m.params, m.Embed)
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		l := Layer{
			AttnNorm: newParam(p+"input_layernorm.weight", d),
			Wq:       newParam(p+"self_attn.q_proj.weight", cfg.Heads*hd, d),
			Wk:       newParam(p+"self_attn.k_proj.weight", cfg.KVHeads*hd, d),
			Wv:       newParam(p+"self_attn.v_proj.weight", cfg.KVHeads*hd, d),
			Wo:       newParam(p+"self_attn.o_proj.weight", d, cfg.Heads*hd),
			MLPNorm:  newParam(p+"post_attention_layernorm.weight", d),
			Wg:       newParam(p+"mlp.gate_proj.weight", cfg.FFN, d),
			Wu:       newParam(p+"mlp.up_proj.weight", cfg.FFN, d),
			Wd:       newParam(p+"mlp.down_proj.weight", d, cfg.FFN),
		}
		m.Layers = append(m.Layers, l)
		m.params = append(m.params, l.AttnNorm, l.Wq, l.Wk, l.Wv, l.Wo, l.MLPNorm, l.Wg, l.Wu, l.Wd)
	}
	m.Norm = newParam("model.norm.weight", d)
	m.params = append(m.params, m.Norm)
	switch {
	case value:
		m.Score = newParam("score.weight", 1, d)
		m.params = append(m.params, m.Score)
	case !cfg.TiedEmbeddings:
		m.LMHead = newParam("lm_head.weight", cfg.Vocab, d)
		m.params = append(m.params, m.LMHead)
	}
	m.buildRope()
	return m, nil
}

// buildRope fills cos/sin for HF's rotate_half RoPE:
// angle(pos, i) = pos · θ^(−2i/HeadDim), i < HeadDim/2.
func (m *Model) buildRope() {
	half := m.Cfg.HeadDim() / 2
	m.cos = make([]float32, m.Cfg.MaxSeq*half)
	m.sin = make([]float32, m.Cfg.MaxSeq*half)
	for i := 0; i < half; i++ {
		// HF computes inv_freq and the angle in float32.
		inv := float32(1 / math.Pow(m.Cfg.RopeTheta, float64(2*i)/float64(2*half)))
		for p := 0; p < m.Cfg.MaxSeq; p++ {
			a := float64(float32(p) * inv)
			m.cos[p*half+i] = float32(math.Cos(a))
			m.sin[p*half+i] = float32(math.Sin(a))
		}
	}
}

// New returns a model with random weights: linear and embedding weights
// ~ N(0, σ²), σ = cfg.InitRange (HF initializer_range, default 0.02), norm weights 1, drawn from a PCG
// stream seeded by seed. A critic (value true) gets score.weight = 0, so
// that its first values are 0.
func New(cfg Config, seed int64, value bool) (*Model, error) {
	m, err := alloc(cfg, value)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x636f6d7061637472))
	std := cfg.initStd()
	for _, p := range m.params {
		switch {
		case len(p.Shape) == 1:
			for i := range p.Data {
				p.Data[i] = 1
			}
		case p == m.Score:
		default:
			for i := range p.Data {
				p.Data[i] = float32(std * rng.NormFloat64())
			}
		}
	}
	return m, nil
}

// NewCritic returns a value model whose trunk is a copy of policy's and
// whose score head is zero.
func NewCritic(policy *Model) *Model {
	c, err := alloc(policy.Cfg, true)
	if err != nil {
		panic(err) // policy's config was validated when it was built
	}
	src := policy.trunk()
	for i, p := range c.trunk() {
		copy(p.Data, src[i].Data)
	}
	c.BF16 = policy.BF16
	return c
}

// trunk lists the parameters shared by policy and critic, in order.
func (m *Model) trunk() []*Param {
	n := 2 + 9*m.Cfg.Layers
	return m.params[:n]
}

// Params lists every parameter in a fixed order (embedding, layers, final
// norm, head), with HF names.
func (m *Model) Params() []*Param { return m.params }

// NumParams counts the scalars of Params.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.params {
		n += len(p.Data)
	}
	return n
}

// EnsureGrads allocates Grad for every parameter that has none.
func (m *Model) EnsureGrads() {
	for _, p := range m.params {
		if p.Grad == nil {
			p.Grad = make([]float32, len(p.Data))
		}
	}
}

// ZeroGrad sets every gradient to 0 (allocating them if needed).
func (m *Model) ZeroGrad() {
	m.EnsureGrads()
	for _, p := range m.params {
		clear(p.Grad)
	}
}

// Clone returns a deep copy of the weights (without gradients).
func (m *Model) Clone() *Model {
	c, err := alloc(m.Cfg, m.Value)
	if err != nil {
		panic(err)
	}
	c.CopyWeightsFrom(m)
	c.BF16 = m.BF16
	return c
}

// CopyWeightsFrom copies src's weights into m; both must have the same
// configuration and kind.
func (m *Model) CopyWeightsFrom(src *Model) {
	if src.Cfg != m.Cfg || src.Value != m.Value {
		panic("model: CopyWeightsFrom between different architectures")
	}
	for i, p := range m.params {
		copy(p.Data, src.params[i].Data)
	}
}

// headWeight is the [Vocab, Dim] matrix of the language-model head.
func (m *Model) headWeight() *Param {
	if m.LMHead != nil {
		return m.LMHead
	}
	return m.Embed
}

// IsNorm reports whether name is an RMSNorm weight (conventionally exempt
// from weight decay).
func IsNorm(name string) bool {
	return strings.HasSuffix(name, "layernorm.weight") || name == "model.norm.weight"
}
