package harbor

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/sandbox"
)

// ErrNoReward means the verifier wrote neither reward.txt nor reward.json.
var ErrNoReward = errors.New("verifier wrote no reward file (reward.txt or reward.json)")

// maxRewardBytes bounds a reward file.
const maxRewardBytes = 1 << 20

// ReadReward reads the verifier's reward from dir, as Harbor does:
// reward.txt (one number) takes precedence over reward.json (an object of
// numbers: its "reward" key, or its only key). All values found are returned
// too (reward.txt gives {"reward": x}). A missing, empty or unparsable file
// is an error; so is one that is not a regular file (the verifier runs
// sandboxed, the host reads what it wrote: a symlink is never followed).
func ReadReward(dir string) (float64, map[string]float64, error) {
	txt := filepath.Join(dir, "reward.txt")
	if b, err := sandbox.ReadRegular(txt, maxRewardBytes); err == nil {
		s := strings.TrimSpace(string(b))
		if s == "" {
			return 0, nil, fmt.Errorf("%s is empty", txt)
		}
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
			return 0, nil, fmt.Errorf("%s: not a finite number: %q", txt, s)
		}
		return r, map[string]float64{"reward": r}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, nil, fmt.Errorf("read %s: %w", txt, err)
	}
	js := filepath.Join(dir, "reward.json")
	b, err := sandbox.ReadRegular(js, maxRewardBytes)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, ErrNoReward
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read %s: %w", js, err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return 0, nil, fmt.Errorf("%s is empty", js)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return 0, nil, fmt.Errorf("%s: %w", js, err)
	}
	all := map[string]float64{}
	for k, v := range raw {
		switch x := v.(type) {
		case float64:
			all[k] = x
		case bool:
			all[k] = map[bool]float64{false: 0, true: 1}[x]
		}
	}
	if r, ok := all["reward"]; ok {
		return r, all, nil
	}
	if len(all) == 1 {
		for _, r := range all {
			return r, all, nil
		}
	}
	return 0, nil, fmt.Errorf("%s: no \"reward\" key and not exactly one numeric value: %s", js, strings.TrimSpace(string(b)))
}
