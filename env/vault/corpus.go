package vault

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/compactrl/compactrl/agent"
)

// Corpus renders the text of n episodes (seeds seed … seed+n−1) as a
// tokenizer would meet it: the system prompt, the agent's summary and resume
// instructions, each task, the expert's actions with their observations, its
// summaries every few steps, an invalid action and a truncation marker. The
// built-in model's BPE is trained on it.
func Corpus(cfg Config, seed int64, n int) ([]string, error) {
	out := []string{SystemPrompt, agent.DefaultSummaryInstruction(), agent.DefaultResumeText()}
	ctx := context.Background()
	for i := range n {
		e, err := New(cfg, seed+int64(i))
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		rng := rand.New(rand.NewPCG(uint64(seed)+uint64(i), 99))
		k := knowledge{found: map[string]string{}, pages: map[int]int{}}
		k.fromTask(e.Task())
		out = append(out, e.Task())
		for step := 0; step < 1000; step++ {
			act := k.next()
			out = append(out, act)
			st, err := e.Step(ctx, act)
			if err != nil {
				return nil, fmt.Errorf("corpus: seed %d: %w", seed+int64(i), err)
			}
			out = append(out, st.Observation)
			if st.Done {
				break
			}
			k.observe(act, st.Observation)
			if step%3 == 2 {
				out = append(out, k.summary(rng, 0.8))
			}
		}
		if i%10 == 0 {
			bad := "reed 1 " + fmt.Sprint(rng.IntN(9))
			if _, err := ParseAction(bad); err != nil {
				out = append(out, bad, "invalid action: "+err.Error())
			}
			out = append(out, agent.OmissionMarker(rng.IntN(2000)))
		}
	}
	return out, nil
}
