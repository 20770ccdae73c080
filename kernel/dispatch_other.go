//go:build !amd64 && !arm64

package kernel

func available() []*impl { return []*impl{generic} }
