package harbor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/compactrl/compactrl/sandbox"
)

// ErrNoReward means the verifier wrote neither reward.txt nor reward.json.
var ErrNoReward = errors.New("verifier wrote no reward file (reward.txt or reward.json)")

// ErrTwoRewardFiles means the verifier wrote both reward.txt and
// reward.json. Harbor reads reward.json and ignores reward.txt; compactrl
// refuses to guess which one the task meant (the caller scores 0 with a
// note).
var ErrTwoRewardFiles = errors.New("verifier wrote both reward.txt and reward.json")

// maxRewardBytes bounds a reward file.
const maxRewardBytes = 1 << 20

// Rewards are the verifier's named rewards (reward.txt gives {"reward": x}).
type Rewards map[string]float64

// ReadRewards reads the verifier's rewards from dir as Harbor's Verifier
// does: reward.json if it exists (a JSON object whose values are finite
// numbers; true/false count as 1/0, as Python's bool is an int), else
// reward.txt (one number as Python's float() reads it: surrounding
// whitespace, "1e0", "1_000", Unicode digits; inf and nan are refused). An
// empty or unparsable file is an error, so is a file that is not a regular
// file (the verifier runs sandboxed and the host reads what it wrote: a
// symlink is never followed). Neither file: ErrNoReward; both:
// ErrTwoRewardFiles (stricter than Harbor).
func ReadRewards(dir string) (Rewards, error) {
	txt, js := filepath.Join(dir, "reward.txt"), filepath.Join(dir, "reward.json")
	_, terr := os.Lstat(txt)
	_, jerr := os.Lstat(js)
	switch {
	case terr == nil && jerr == nil:
		return nil, fmt.Errorf("%s: %w", dir, ErrTwoRewardFiles)
	case jerr == nil:
		return readRewardJSON(js)
	case terr == nil:
		return readRewardText(txt)
	case !errors.Is(jerr, os.ErrNotExist):
		return nil, fmt.Errorf("read %s: %w", js, jerr)
	case !errors.Is(terr, os.ErrNotExist):
		return nil, fmt.Errorf("read %s: %w", txt, terr)
	}
	return nil, ErrNoReward
}

func readRewardText(path string) (Rewards, error) {
	b, err := sandbox.ReadRegular(path, maxRewardBytes)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	r, err := pyFloatText(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: not a number: %q", path, clip(b))
	}
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return nil, fmt.Errorf("%s: non-finite reward %q", path, clip(b))
	}
	return Rewards{"reward": r}, nil
}

func readRewardJSON(path string) (Rewards, error) {
	b, err := sandbox.ReadRegular(path, maxRewardBytes)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%s: not UTF-8", path)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: data after the JSON value", path)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a JSON object of numbers, got %s", path, clip(b))
	}
	out := make(Rewards, len(obj))
	for k, x := range obj {
		switch y := x.(type) {
		case bool:
			out[k] = 0
			if y {
				out[k] = 1
			}
		case json.Number:
			f, err := jsonNumber(y)
			if err != nil {
				return nil, fmt.Errorf("%s: reward %q: %w", path, k, err)
			}
			out[k] = f
		default:
			return nil, fmt.Errorf("%s: reward %q: non-numeric value %s", path, k, clip([]byte(fmt.Sprint(x))))
		}
	}
	return out, nil
}

// jsonNumber converts as Python's json does: an integer literal is exact
// (then must fit a float64, which Harbor's float() of the reward needs), a
// float literal past the float range is infinite and refused.
func jsonNumber(n json.Number) (float64, error) {
	if i, ok := new(big.Int).SetString(n.String(), 10); ok {
		f, acc := new(big.Float).SetInt(i).Float64()
		if math.IsInf(f, 0) || (acc != big.Exact && math.Abs(f) == math.MaxFloat64) {
			return 0, fmt.Errorf("integer %s is too large for a float", clip([]byte(n.String())))
		}
		return f, nil
	}
	f, err := pyFloatText(n.String())
	if err != nil {
		return 0, fmt.Errorf("bad number %s", n)
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("non-finite reward %s", clip([]byte(n.String())))
	}
	return f, nil
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// Primary is the task's scalar reward as Harbor's jobs report it: the
// "reward" key, else the only key; false when there is neither (several
// keys without "reward", or none).
func Primary(r Rewards) (float64, bool) {
	if v, ok := r["reward"]; ok {
		return v, true
	}
	if len(r) == 1 {
		for _, v := range r {
			return v, true
		}
	}
	return 0, false
}

// RewardChoice is how the scalar reward used for RL is taken from the
// verifier's rewards, which Harbor keeps all of (reward.json may hold
// several keys; Harbor's metrics aggregate each key apart and define no
// one scalar). The zero value is Harbor's own reading of a trial's reward
// (Primary: the "reward" key, else the only key); Key takes one named key;
// Agg aggregates every key of the episode's file ("mean", "sum", "min",
// "max", as Harbor's metrics of those names do across trials).
type RewardChoice struct {
	Key string
	Agg string
}

// RewardAggs are the aggregations RewardChoice.Agg may name.
var RewardAggs = []string{"mean", "sum", "min", "max"}

// ParseRewardChoice checks a user's choice (--reward-key, --reward-agg):
// at most one of them, an aggregation RewardAggs names.
func ParseRewardChoice(key, agg string) (RewardChoice, error) {
	switch {
	case key != "" && agg != "":
		return RewardChoice{}, fmt.Errorf("--reward-key %q and --reward-agg %q: choose one", key, agg)
	case agg != "" && !slices.Contains(RewardAggs, agg):
		return RewardChoice{}, fmt.Errorf("--reward-agg %q: want one of %s", agg, strings.Join(RewardAggs, ", "))
	case key != "" && strings.TrimSpace(key) != key:
		return RewardChoice{}, fmt.Errorf("--reward-key %q: leading or trailing space", key)
	}
	return RewardChoice{Key: key, Agg: agg}, nil
}

// String names the choice as the flags do.
func (c RewardChoice) String() string {
	switch {
	case c.Key != "":
		return "--reward-key " + c.Key
	case c.Agg != "":
		return "--reward-agg " + c.Agg
	}
	return `Harbor's reward (the "reward" key, else the only key)`
}

// Scalar is the chosen scalar of r; an error says why r has none (the key
// is missing, or several keys and none named "reward").
func (c RewardChoice) Scalar(r Rewards) (float64, error) {
	switch {
	case c.Key != "":
		v, ok := r[c.Key]
		if !ok {
			return 0, fmt.Errorf("the verifier's rewards have no key %q (keys: %s)", c.Key, strings.Join(rewardKeys(r), ", "))
		}
		return v, nil
	case c.Agg != "":
		if len(r) == 0 {
			return 0, errors.New("the verifier's reward.json is an empty object")
		}
		keys := rewardKeys(r)
		acc := r[keys[0]]
		for _, k := range keys[1:] {
			switch c.Agg {
			case "mean", "sum":
				acc += r[k]
			case "min":
				acc = math.Min(acc, r[k])
			case "max":
				acc = math.Max(acc, r[k])
			}
		}
		if c.Agg == "mean" {
			acc /= float64(len(keys))
		}
		return acc, nil
	}
	v, ok := Primary(r)
	if !ok {
		return 0, fmt.Errorf("the verifier's reward.json has %d keys (%s) and none named \"reward\": Harbor defines no one reward for it (choose one with --reward-key or --reward-agg)", len(r), strings.Join(rewardKeys(r), ", "))
	}
	return v, nil
}

func rewardKeys(r Rewards) []string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CheckRewardChoice refuses, at load, a choice the task cannot produce:
// a key other than "reward" when no file of its tests/ names reward.json
// (it writes reward.txt, whose only key is "reward"), or a key no file of
// its tests/ names at all. The check reads tests/ as text (each file up to
// maxScanBytes); aggregations and Harbor's own reading pass.
func (t *Task) CheckRewardChoice(c RewardChoice) error {
	if c.Key == "" {
		return nil
	}
	mentionsJSON, mentionsKey := false, c.Key == "reward"
	err := filepath.WalkDir(filepath.Join(t.Dir, "tests"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := sandbox.ReadRegular(p, maxScanBytes)
		if err != nil {
			return nil // larger than the scan reads, or not a plain file: not a script that names keys
		}
		mentionsJSON = mentionsJSON || bytes.Contains(b, []byte("reward.json"))
		mentionsKey = mentionsKey || bytes.Contains(b, []byte(c.Key))
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("task %s: tests/: %w", t.Name, err)
	case !mentionsJSON && c.Key != "reward":
		return fmt.Errorf("task %s: %s: no file of tests/ names reward.json, so its only reward is reward.txt's key \"reward\"", t.Name, c)
	case !mentionsKey:
		return fmt.Errorf("task %s: %s: no file of tests/ names the key %q", t.Name, c, c.Key)
	}
	return nil
}

// maxScanBytes bounds each tests/ file CheckRewardChoice reads.
const maxScanBytes = 4 << 20
