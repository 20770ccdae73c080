package sandbox

import (
	"os"
	"strconv"
	"strings"
)

// allPIDs lists the thread-group ids under /proc (this process's pid
// namespace, the host's for the callers here).
func allPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procComm is /proc/PID/comm without its newline ("?" when gone).
func procComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// procStat returns the parent pid and the session id of pid (fields 4 and
// 6 of /proc/PID/stat, after the parenthesised command name).
func procStat(pid int) (ppid, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	return ppid, sid, err1 == nil && err2 == nil
}

// procEnviron is pid's initial environment (NUL-separated; nil when gone
// or unreadable).
func procEnviron(pid int) []byte {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return b
}

// pidNS identifies pid's pid namespace ("" when gone).
func pidNS(pid int) string {
	s, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	return s
}

// threadsTraced reports whether any thread of pid is being traced.
func threadsTraced(pid int) bool {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				return true
			}
		}
	}
	return false
}

// procAlive reports whether any thread of pid is neither a zombie nor
// dead: a thread group whose leader exited lives on in its other threads.
func procAlive(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(dir + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			continue
		}
		if st := s[i+2]; st != 'Z' && st != 'X' && st != 'x' {
			return true
		}
	}
	return false
}
