//go:build !linux

package format

func physicalMemory() int64 { return fallbackMemory }
