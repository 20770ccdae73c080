package kernel

// impls lists the code paths this CPU can run, fastest first; the last is always generic.
var impls = available()

// active is the code path Gemm and the vector helpers use: the fastest one this CPU supports.
var active = impls[0]

// Path names the code path in use on this machine ("avx512", "avx2" or "go").
func Path() string { return active.name }
