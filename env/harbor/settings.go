package harbor

import (
	"strings"

	"github.com/compactrl/compactrl/env/tasks"
)

// Harbor's own settings: how the episode's scalar reward is taken from a
// verifier that reports several (reward.json).
const (
	settingRewardKey = "reward-key"
	settingRewardAgg = "reward-agg"
)

func init() {
	tasks.RegisterSettings("harbor", checkSettings,
		tasks.Setting{Name: settingRewardKey, Usage: "Harbor: the reward.json key used as the episode's reward (default: \"reward\", else the only key); tasks whose tests cannot write it are skipped"},
		tasks.Setting{Name: settingRewardAgg, Usage: "Harbor: aggregate every reward.json key into the episode's reward: " + strings.Join(RewardAggs, ", ")},
	)
}

// checkSettings refuses a reward choice ParseRewardChoice refuses.
func checkSettings(s tasks.Settings) error {
	_, err := rewardChoice(s)
	return err
}

// rewardChoice is the RewardChoice of --reward-key and --reward-agg.
func rewardChoice(s tasks.Settings) (RewardChoice, error) {
	return ParseRewardChoice(s.Get(settingRewardKey), s.Get(settingRewardAgg))
}
