//go:build linux

package format

import "syscall"

func physicalMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return fallbackMemory
	}
	return int64(si.Totalram) * int64(si.Unit)
}
