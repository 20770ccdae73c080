package sandbox

import "errors"

// ErrNoGuard means this host cannot guard a directory (not Linux, or
// not root: mounting a tmpfs and fanotify permission events need
// CAP_SYS_ADMIN).
var ErrNoGuard = errors.New("directory guard unavailable")

// ChannelOpen is one open(2) of a file in a guarded directory by a process
// that the channel's policy did not admit (or any open after Seal).
type ChannelOpen struct {
	PID  int    // host pid of the opener
	Comm string // its command name, as /proc reports it
	Path string // the file it opened, relative to the channel
	// Phase is when it happened: "closed" (before Admit), "admitted"
	// (during verification, not by the verifier) or "sealed" (after Seal).
	Phase string
}

// AdmitFunc decides whether the process pid (host pid namespace, blocked in
// open(2) while the decision is made) belongs to the verifier's run.
type AdmitFunc func(pid int) bool
