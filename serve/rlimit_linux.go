//go:build linux

package serve

import (
	"fmt"
	"syscall"
)

// RaiseOpenFiles makes the process's open-file soft limit (RLIMIT_NOFILE)
// at least need, raising it up to the hard limit, and returns the soft
// limit in force. A hard limit below need is an error that says so: the
// server would fail its rollouts with "too many open files" under load.
func RaiseOpenFiles(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("open-file limit: getrlimit: %w", err)
	}
	if uint64(lim.Cur) >= need {
		return uint64(lim.Cur), nil
	}
	if uint64(lim.Max) < need {
		return uint64(lim.Cur), fmt.Errorf("open-file limit: the hard limit is %d files (soft %d), below the %d the configured concurrency needs (connections + %d per episode in flight + %d): raise it (ulimit -Hn, LimitNOFILE=) or lower --max-episodes, --queue or --max-conns",
			uint64(lim.Max), uint64(lim.Cur), need, FilesPerEpisode, baseFiles)
	}
	old := lim.Cur
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return uint64(old), fmt.Errorf("open-file limit: raise the soft limit from %d to %d: %w", uint64(old), need, err)
	}
	return need, nil
}
