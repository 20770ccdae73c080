// Package shelltasktest plays scripted policies against environments in
// tests of the shell-task environments (env/harbor, env/swebench).
package shelltasktest

import (
	"context"
	"io"
	"testing"

	"github.com/compactrl/compactrl/agent"
)

// Play resets env, sends replies in order until the episode ends, closes
// env when it is an io.Closer, and returns the task shown to the policy
// and the reward. An error, or replies running out before the episode
// ends, fails the test.
func Play(t testing.TB, env agent.Environment, replies ...string) (task string, reward float64) {
	t.Helper()
	ctx := context.Background()
	task, err := env.Reset(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := env.(io.Closer); ok {
		defer func() {
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}()
	}
	for _, r := range replies {
		st, err := env.Step(ctx, r)
		if err != nil {
			t.Fatalf("step %q: %v", r, err)
		}
		if st.Done {
			return task, st.Reward
		}
	}
	t.Fatal("episode did not end")
	return task, 0
}
