package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times.
const clockTick = 100

// pidCPU is the user+system CPU time of process pid from /proc/PID/stat
// (0 where there is no /proc).
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * time.Second / clockTick
}

// loadAverage is the first field of /proc/loadavg (the 1-minute load
// average), or -1 where there is none.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// cpuShare is cpu / (wall · threads): the fraction of its threads' time an
// engine spent on a CPU (1 when it had every core it asked for, busy).
func cpuShare(cpu, wall time.Duration, threads int) float64 {
	if cpu <= 0 || wall <= 0 || threads <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds() / float64(threads)
}
