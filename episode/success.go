package episode

// SuccessThreshold is the smallest reward that counts as a success. Rewards
// lie in [0, 1] and a success is a full reward; the tolerance absorbs the
// rounding of a reward computed as a sum or product of partial scores (a
// verifier summing 0.7+0.2+0.1 gets 0.9999999999999999), so that the same
// attempt never counts as a success in one place and a failure in another.
const SuccessThreshold = 1 - 1e-9

// Success reports whether reward is a full reward (≥ SuccessThreshold). It is
// the one definition of success used by rollout statistics, eval's pass@1
// and the trainer's success rate.
func Success(reward float64) bool { return reward >= SuccessThreshold }

// Succeeded reports whether e finished (status ok) with a full reward: an
// overlong, format_error or infra_error episode is never a success whatever
// its reward field says.
func (e *Episode) Succeeded() bool { return e.Status == StatusOK && Success(e.Reward) }
