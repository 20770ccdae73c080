//go:build !amd64

package kernel

func available() []*impl { return []*impl{generic} }
