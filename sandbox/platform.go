package sandbox

import "fmt"

// The platform files give every system the same API: platform_linux.go
// (bubblewrap, cgroups, tmpfs workspaces), platform_other.go (the other
// Unix systems: a container engine only), platform_unix.go (what all Unix
// systems share: process groups, signals, flock) and platform_windows.go
// (no sandbox at all). Off Linux, what cannot run says why and what to use
// instead; the texts are here so that every system's tests can check them.

// noBwrapError is what Bubblewrap says on a Unix system other than Linux.
func noBwrapError(goos, goarch string) error {
	return fmt.Errorf("sandbox: bubblewrap needs Linux (namespaces, cgroups); this is %s/%s: run shell tasks with --runner docker or --runner podman (sandbox.Container), or on a Linux machine; the vault suite, train, rollout and bench need no sandbox", goos, goarch)
}

// noSandboxError is what every sandbox says on a system without Unix
// process groups and signals (Windows): neither runner can start there.
func noSandboxError(goos, goarch string) error {
	return fmt.Errorf("sandbox: shell tasks need Linux (bubblewrap) or a Unix container engine (--runner docker or podman); this is %s/%s: on Windows run compactrl inside WSL2; the vault suite, pretrain, train, rollout and bench need no sandbox", goos, goarch)
}
