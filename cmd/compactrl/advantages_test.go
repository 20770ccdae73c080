package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// Episode "a" (R = 2): segment 0 trainable, mask [1 1 0], V [1 0.5 4];
// segment 1 not trainable; segment 2 trainable, mask [0 1 1], V [8 1 1.5].
// Episode "b" is overlong (R = 1): one segment, mask [1 1], V [0 0].
const advInput = `{"id":"a","task":"t1","group":"g","reward":2,"status":"ok","segments":[` +
	`{"kind":"exec","trainable":true,"prompt_ids":[5,6],"response_ids":[1,2,3],"loss_mask":[1,1,0],"logprobs":[-0.5,-1,0],"values":[1,0.5,4]},` +
	`{"kind":"summary","trainable":false,"prompt_ids":[7],"response_ids":[4,5],"loss_mask":[1,1]},` +
	`{"kind":"exec","trainable":true,"prompt_ids":[8],"response_ids":[6,7,8],"loss_mask":[0,1,1],"values":[8,1,1.5]}],` +
	`"metrics":{"turns":3}}
{"id":"b","task":"t1","group":"g","reward":1,"status":"overlong","segments":[` +
	`{"kind":"exec","trainable":true,"prompt_ids":[1],"response_ids":[1,2],"loss_mask":[1,1],"values":[0,0]}]}
`

func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}, append([]string{"advantages"}, args...))
	return out.String(), errb.String(), code
}

func readEpisodes(t *testing.T, s string) []episode.Episode {
	t.Helper()
	r := episode.NewReader(strings.NewReader(s))
	var eps []episode.Episode
	for {
		ep, err := r.Next()
		if errors.Is(err, io.EOF) {
			return eps
		}
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		eps = append(eps, ep)
	}
}

// wantVec checks got against want to 1e-12 at every position.
func wantVec(t *testing.T, name string, got, want []float64) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }) {
		t.Errorf("%s: got %v, want %v", name, got, want)
	}
}

// cross-gae, γ = 1, λ = 0.5 (γλ = 0.5), by hand:
//
//	segment 2: p2 δ = 2 − 1.5 = 0.5, A = 0.5, G = 2; p1 δ = 1.5 − 1 = 0.5, A = 0.5 + 0.5·0.5 = 0.75, G = 1.75
//	segment 0: p1 δ = 2 − 0.5 = 1.5, A = 1.5, G = 2; p0 δ = 0.5 − 1 = −0.5, A = −0.5 + 0.75 = 0.25, G = 1.25
//	           scaled by 0.5^{N_{>0} = 2} = 0.25: Â = [0.0625 0.375 0]
//	episode b (overlong, masked by default): zeros; unmasked: p1 A = 1, G = 1; p0 A = 0.5, G = 0.5
func TestAdvantagesCLICrossGAE(t *testing.T) {
	out, stderr, code := runCLI(t, advInput, "--alpha", "0", "--lambda", "0.5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	eps := readEpisodes(t, out)
	if len(eps) != 2 || eps[0].ID != "a" || eps[1].ID != "b" {
		t.Fatalf("output episodes %+v", eps)
	}
	s := eps[0].Segments
	wantVec(t, "a adv[0]", s[0].Advantages, []float64{0.0625, 0.375, 0})
	wantVec(t, "a ret[0]", s[0].Returns, []float64{1.25, 2, 0})
	wantVec(t, "a adv[1]", s[1].Advantages, []float64{0, 0})
	wantVec(t, "a ret[1]", s[1].Returns, []float64{0, 0})
	wantVec(t, "a adv[2]", s[2].Advantages, []float64{0, 0.75, 0.5})
	wantVec(t, "a ret[2]", s[2].Returns, []float64{0, 1.75, 2})
	wantVec(t, "b adv (masked)", eps[1].Segments[0].Advantages, []float64{0, 0})
	// Everything else passes through unchanged.
	wantVec(t, "a logprobs", s[0].Logprobs, []float64{-0.5, -1, 0})
	if eps[0].Metrics["turns"] != 3 || eps[0].Segments[0].PromptIDs[1] != 6 || eps[0].Group != "g" {
		t.Errorf("fields lost: %+v", eps[0])
	}

	out, stderr, code = runCLI(t, advInput, "--alpha=0", "--lambda=0.5", "--no-mask-overlong")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	eps = readEpisodes(t, out)
	wantVec(t, "b adv", eps[1].Segments[0].Advantages, []float64{0.5, 1})
	wantVec(t, "b ret", eps[1].Segments[0].Returns, []float64{0.5, 1})
}

// independent and concat on episode a, γ = 1, λ = 0.5:
//
//	independent: segment 0 unscaled, [0.25 1.5 0].
//	concat: segment 2 as above; segment 0 p1: δ = 0 + 1 (next value: segment 2's
//	first optimised, V = 1) − 0.5 = 0.5, A = 0.5 + 0.5·0.75 = 0.875, G = 1.375;
//	p0: δ = 0.5 − 1 = −0.5, A = −0.5 + 0.5·0.875 = −0.0625, G = 0.9375.
func TestAdvantagesCLIOtherGAE(t *testing.T) {
	for _, c := range []struct {
		est       string
		adv0, ret []float64
	}{
		{"independent", []float64{0.25, 1.5, 0}, []float64{1.25, 2, 0}},
		{"concat", []float64{-0.0625, 0.875, 0}, []float64{0.9375, 1.375, 0}},
	} {
		t.Run(c.est, func(t *testing.T) {
			out, stderr, code := runCLI(t, advInput, "--estimator", c.est, "--gamma", "1", "--alpha", "0", "--lambda", "0.5")
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", c.est, code, stderr)
			}
			s := readEpisodes(t, out)[0].Segments
			wantVec(t, c.est+" adv[0]", s[0].Advantages, c.adv0)
			wantVec(t, c.est+" ret[0]", s[0].Returns, c.ret)
			wantVec(t, c.est+" adv[2]", s[2].Advantages, []float64{0, 0.75, 0.5})
		})
	}
}

// The default λ is length-adaptive: episode a has l = 4 optimised tokens,
// so λ = 1 − 1/(1.5·4) = 5/6, the same as --lambda 0.8333….
func TestAdvantagesCLIAdaptive(t *testing.T) {
	def, _, code1 := runCLI(t, advInput)
	alpha, _, code2 := runCLI(t, advInput, "--alpha", "1.5")
	fixed, _, code3 := runCLI(t, advInput, "--alpha", "0", "--lambda", "0.8333333333333334")
	if code1 != 0 || code2 != 0 || code3 != 0 {
		t.Fatalf("exit codes %d %d %d", code1, code2, code3)
	}
	if def != alpha {
		t.Errorf("default differs from --alpha 1.5")
	}
	a, b := readEpisodes(t, def)[0].Segments, readEpisodes(t, fixed)[0].Segments
	for i := range a {
		wantVec(t, "adaptive", a[i].Advantages, b[i].Advantages)
	}
}

// Group g with the overlong episode masked has one member (a group of one
// gets 0); unmasked: rewards 2 and 1, mean 1.5, sample std √0.5.
func TestAdvantagesCLIGRPO(t *testing.T) {
	out, stderr, code := runCLI(t, advInput, "--estimator", "grpo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	wantVec(t, "singleton", readEpisodes(t, out)[0].Segments[0].Advantages, []float64{0, 0, 0})

	out, stderr, code = runCLI(t, advInput, "--estimator", "grpo", "--no-mask-overlong", "--eps", "0", "--group-by-task")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	eps := readEpisodes(t, out)
	a := 0.5 / math.Sqrt(0.5)
	wantVec(t, "grpo a[0]", eps[0].Segments[0].Advantages, []float64{a, a, 0})
	wantVec(t, "grpo a ret[0]", eps[0].Segments[0].Returns, []float64{2, 2, 0})
	wantVec(t, "grpo a[2]", eps[0].Segments[2].Advantages, []float64{0, a, a})
	wantVec(t, "grpo b", eps[1].Segments[0].Advantages, []float64{-a, -a})

	out, _, code = runCLI(t, advInput, "--estimator", "dr-grpo", "--no-mask-overlong")
	if code != 0 {
		t.Fatal(code)
	}
	wantVec(t, "dr-grpo b", readEpisodes(t, out)[1].Segments[0].Advantages, []float64{-0.5, -0.5})
}

func TestAdvantagesCLIErrors(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(advInput), "\n")
	noValues := strings.Replace(lines[0], `"values":[8,1,1.5]`, `"logprobs":[0,0,0]`, 1)
	for _, c := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"bad JSON", lines[0] + "\n{\"id\": \n" + lines[1] + "\n", nil, "line 2: unexpected"},
		{"bad mask", strings.Replace(lines[0], `[1,1,0]`, `[1,2,0]`, 1), nil, "line 1: segments[0].loss_mask[1]: value 2, want 0 or 1"},
		{"unequal lengths", lines[1] + "\n" + strings.Replace(lines[0], `"values":[1,0.5,4]`, `"values":[1,0.5]`, 1), nil,
			"line 2: segments[0].values: length 2, want 0 or 3"},
		{"missing values", noValues, nil, `line 1: episode "a": segments[2].values`},
		{"grpo bad line", advInput + "{}\n", []string{"--estimator", "grpo"}, "line 3: id: missing"},
		{"lambda and alpha", advInput, []string{"--lambda", "0.5", "--alpha", "2"}, "lambda: 0.5 is used only with alpha 0"},
		{"lambda beside the default alpha", advInput, []string{"--lambda", "0.5"}, "lambda: 0.5 is used only with alpha 0 (alpha 1.5 selects"},
		{"estimator", advInput, []string{"--estimator", "ppo"}, `unknown estimator "ppo"`},
		{"gamma range", advInput, []string{"--gamma", "2"}, "gamma: 2 must be in [0, 1]"},
		{"args", advInput, []string{"x.jsonl"}, "unexpected arguments"},
		{"flag", advInput, []string{"--nope"}, "flag provided but not defined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := runCLI(t, c.stdin, c.args...)
			if code == 0 {
				t.Errorf("%s: exit 0", c.name)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("%s: stderr %q, want it to contain %q", c.name, stderr, c.want)
			}
			if c.name == "bad JSON" && len(readEpisodes(t, out)) != 1 {
				t.Errorf("bad JSON: the episode before the bad line was not written: %q", out)
			}
		})
	}
}

// refGAE computes an episode's advantages and returns straight from the
// equations of docs/design.md §1.7 (direct sums, no recursion), for episodes the
// implementation was not tuned on.
func refGAE(ep episode.Episode, est string, gamma, lambda float64, maskOverlong bool) (adv, ret [][]float64) {
	for _, s := range ep.Segments {
		adv = append(adv, make([]float64, len(s.LossMask)))
		ret = append(ret, make([]float64, len(s.LossMask)))
	}
	if ep.Status == episode.StatusInfraError || (maskOverlong && ep.Status == episode.StatusOverlong) {
		return adv, ret
	}
	type tok struct{ seg, pos int }
	var runs [][]tok // optimised tokens per trainable segment, or one run for concat
	for si, s := range ep.Segments {
		if !s.Trainable {
			continue
		}
		var run []tok
		for i, m := range s.LossMask {
			if m == 1 {
				run = append(run, tok{si, i})
			}
		}
		if est == "concat" && len(runs) > 0 {
			runs[0] = append(runs[0], run...)
		} else {
			runs = append(runs, run)
		}
	}
	gl := gamma * lambda
	for k, run := range runs {
		n := len(run)
		v := func(j int) float64 { return ep.Segments[run[j].seg].Values[run[j].pos] }
		delta := make([]float64, n)
		for j := range n {
			next, r := 0.0, 0.0
			if j+1 < n {
				next = v(j + 1)
			} else {
				r = ep.Reward
			}
			delta[j] = r + gamma*next - v(j)
		}
		later := 0
		for _, r := range runs[k+1:] {
			later += len(r)
		}
		scale := 1.0
		if est == "cross-gae" {
			scale = math.Pow(gl, float64(later))
		}
		for j := range n {
			a := 0.0
			for l := 0; j+l < n; l++ {
				a += math.Pow(gl, float64(l)) * delta[j+l]
			}
			adv[run[j].seg][run[j].pos] = scale * a
			ret[run[j].seg][run[j].pos] = a + v(j)
		}
	}
	return adv, ret
}

func TestAdvantagesCLIRandomEpisodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 12))
	statuses := []episode.Status{episode.StatusOK, episode.StatusOK, episode.StatusOverlong, episode.StatusInfraError, episode.StatusFormatError}
	var in bytes.Buffer
	w := episode.NewWriter(&in)
	var eps []episode.Episode
	for e := range 30 {
		ep := episode.Episode{ID: fmt.Sprint("r", e), Task: "t", Reward: rng.NormFloat64(), Status: statuses[rng.IntN(len(statuses))]}
		for range 1 + rng.IntN(5) {
			n := rng.IntN(10)
			s := episode.Segment{Kind: episode.KindExec, Trainable: rng.IntN(4) > 0, PromptIDs: []int{1},
				ResponseIDs: make([]int, n), LossMask: make([]int, n), Values: make([]float64, n)}
			for i := range n {
				s.LossMask[i] = min(1, rng.IntN(3))
				s.Values[i] = rng.NormFloat64()
			}
			ep.Segments = append(ep.Segments, s)
		}
		eps = append(eps, ep)
		if err := w.Write(&ep); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	for _, est := range []string{"cross-gae", "independent", "concat"} {
		for _, mask := range []bool{true, false} {
			gamma, lambda := 0.7+0.3*rng.Float64(), 0.5+0.5*rng.Float64()
			args := []string{"--estimator", est, "--gamma", fmt.Sprint(gamma), "--alpha", "0", "--lambda", fmt.Sprint(lambda)}
			if !mask {
				args = append(args, "--no-mask-overlong")
			}
			out, stderr, code := runCLI(t, in.String(), args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
			got := readEpisodes(t, out)
			for i, ep := range eps {
				adv, ret := refGAE(ep, est, gamma, lambda, mask)
				for s := range ep.Segments {
					name := fmt.Sprintf("%v episode %d segment %d", args, i, s)
					wantVec(t, name+" adv", got[i].Segments[s].Advantages, adv[s])
					wantVec(t, name+" ret", got[i].Segments[s].Returns, ret[s])
				}
			}
		}
	}
}

// γ = 0 is a legal discount (docs/design.md §1.7) on the command line as in
// a training config: each optimised token's advantage is its own
// δ_i = r_i − V_i, and (γλ)^{N_{>s}} = 0 zeroes every trainable segment
// but the last. Episode a, cross-gae:
//
//	segment 2: p2 δ = 2 − 1.5 = 0.5, p1 δ = 0 − 1 = −1; returns δ + V = [0 0 2]
//	segment 0: p1 δ = 2 − 0.5 = 1.5, p0 δ = 0 − 1 = −1, both scaled by 0^2 = 0;
//	           returns A^loc + V = [0 2 0]
func TestAdvantagesCLIGammaZero(t *testing.T) {
	out, stderr, code := runCLI(t, advInput, "--gamma", "0")
	if code != 0 {
		t.Fatalf("--gamma 0: exit %d: %s", code, stderr)
	}
	s := readEpisodes(t, out)[0].Segments
	wantVec(t, "a adv[2]", s[2].Advantages, []float64{0, -1, 0.5})
	wantVec(t, "a ret[2]", s[2].Returns, []float64{0, 0, 2})
	wantVec(t, "a adv[0]", s[0].Advantages, []float64{0, 0, 0})
	wantVec(t, "a ret[0]", s[0].Returns, []float64{0, 2, 0})
}

// TestAdvantagesCLIMasksUnscoredEpisodes: an episode whose verifier could
// not run (verifier_error) is masked as the trainer and the plug-ins mask
// it: zero advantages and returns, like infra_error; overlong follows
// --mask-overlong.
func TestAdvantagesCLIMasksUnscoredEpisodes(t *testing.T) {
	for status, masked := range map[string]bool{"ok": false, "format_error": false, "verifier_error": true, "infra_error": true} {
		in := strings.Replace(strings.SplitAfter(advInput, "\n")[0], `"status":"ok"`, `"status":"`+status+`"`, 1)
		stdout, stderr, code := runCLI(t, in, "--estimator", "cross-gae", "--alpha", "0", "--lambda", "1")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", status, code, stderr)
		}
		eps := readEpisodes(t, stdout)
		nonzero := false
		for _, s := range eps[0].Segments {
			for i := range s.Advantages {
				nonzero = nonzero || s.Advantages[i] != 0 || s.Returns[i] != 0
			}
		}
		if nonzero == masked {
			t.Errorf("%s: nonzero advantages %v, want masked %v", status, nonzero, masked)
		}
	}
}
