package remote_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/remote"
)

// Two vLLM servers behind one Sampler. An outage that outlasts the retries
// surfaces as ErrUnavailable (the agent loop records infra_error); the
// caller's own deadline is not an outage: the error is the context's.
func ExampleDial() {
	eps, err := remote.ParseEndpoints("vllm=http://10.0.0.5:8000,model=Qwen/Qwen3-8B,max=64;vllm=http://10.0.0.6:8000,model=Qwen/Qwen3-8B,max=64")
	if err != nil {
		fmt.Println(err)
		return
	}
	pool, err := remote.Dial(remote.PoolConfig{Timeout: 2 * time.Minute, Seed: 1}, nil, eps...)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err = pool.Sample(ctx, infer.Request{Prompt: []int{1, 2, 3}, MaxTokens: 16, Temperature: 1, Stop: []int{151645}})
	fmt.Println(err != nil, errors.Is(err, remote.ErrUnavailable))
	// Output: true false
}
