package kernel

import (
	"fmt"
	"os"
	"strings"
)

// EnvPath is the environment variable that forces a code path: "avx512",
// "avx2", "neon" or "go" (empty: the fastest this CPU supports).
const EnvPath = "COMPACTRL_KERNEL"

// impls lists the code paths this CPU can run, fastest first; the last is always generic.
var impls = available()

// active is the code path Gemm and the vector helpers use: the one EnvPath
// names, else the fastest this CPU supports. It is fixed at start-up.
var active, selectErr = choose(os.Getenv(EnvPath))

// choose returns the code path named name among those this CPU supports
// (the fastest for ""), or the fastest with an error naming what is
// supported.
func choose(name string) (*impl, error) {
	if name == "" {
		return impls[0], nil
	}
	var names []string
	for _, p := range impls {
		if p.name == name {
			return p, nil
		}
		names = append(names, p.name)
	}
	return impls[0], fmt.Errorf("%s=%s: this CPU supports the kernel paths %s (avx512 needs AVX-512F/VL, AVX2, FMA and BMI2; avx2 needs AVX2 and FMA; neon needs arm64; go runs anywhere)", EnvPath, name, strings.Join(names, ", "))
}

// Path names the code path in use on this machine ("avx512", "avx2", "neon" or "go").
func Path() string { return active.name }

// Paths lists the code paths this CPU supports, fastest first.
func Paths() []string {
	var names []string
	for _, p := range impls {
		names = append(names, p.name)
	}
	return names
}

// Err reports a code path requested through EnvPath that this CPU cannot
// run (the fastest supported path is then in use). Programs should refuse
// to run with it rather than measure another path than the one asked for.
func Err() error { return selectErr }
