package sandbox

import (
	"strings"
	"testing"
)

// TestOffLinuxErrorsSayWhatToUse checks the texts of the systems where a
// sandbox cannot start (platform_other.go, platform_windows.go): each names
// the system, what to use instead and what needs no sandbox. Which system
// returns which is checked by that system's own test.
func TestOffLinuxErrorsSayWhatToUse(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want []string
	}{
		{"bubblewrap on darwin", noBwrapError("darwin", "arm64"),
			[]string{"bubblewrap needs Linux", "darwin/arm64", "--runner docker", "--runner podman", "need no sandbox"}},
		{"any sandbox on windows", noSandboxError("windows", "amd64"),
			[]string{"shell tasks need Linux (bubblewrap)", "windows/amd64", "WSL2", "--runner docker or podman", "train, rollout and bench need no sandbox"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, w := range c.want {
				if !strings.Contains(c.err.Error(), w) {
					t.Errorf("%q does not say %q", c.err, w)
				}
			}
		})
	}
}
