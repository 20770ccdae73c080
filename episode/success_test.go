package episode

import (
	"fmt"
	"testing"
)

func TestSuccessOneDefinition(t *testing.T) {
	cases := []struct {
		reward float64
		want   bool
	}{
		{1, true},
		{0.7 + 0.2 + 0.1, true}, // 0.9999999999999999: a full reward after rounding
		{1 - 1e-6, false},
		{0.5, false},
		{0, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("reward=%v", c.reward), func(t *testing.T) {
			if got := Success(c.reward); got != c.want {
				t.Errorf("Success(%v) = %v, want %v", c.reward, got, c.want)
			}
		})
	}
	for _, st := range []Status{StatusOverlong, StatusFormatError, StatusInfraError} {
		t.Run(string(st), func(t *testing.T) {
			e := Episode{Status: st, Reward: 1}
			if e.Succeeded() {
				t.Errorf("status %s with reward 1 counted as a success", st)
			}
		})
	}
	if e := (Episode{Status: StatusOK, Reward: 1}); !e.Succeeded() {
		t.Error("ok with reward 1 not a success")
	}
}
