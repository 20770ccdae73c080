package sandbox

import "errors"

// ErrNoGuard means this host cannot guard a directory (not Linux, or
// not root: mounting a tmpfs and fanotify permission events need
// CAP_SYS_ADMIN).
var ErrNoGuard = errors.New("directory guard unavailable")

// ChannelOpen is one violation of a guarded directory: an open(2) of a
// file in it by a process that the channel's policy did not admit (or any
// open after Seal), or a change to it (an entry created, deleted or moved,
// attributes or contents changed) by a process outside the admitted run,
// in any phase.
type ChannelOpen struct {
	PID  int    // host pid of the process (0 when unknown: lost events)
	Comm string // its command name, as /proc reports it ("?" once it is gone)
	Path string // the file, relative to the channel ("?" when it cannot be resolved)
	// Phase is when it happened: "closed" (before Admit: staging and the
	// agent phase), "admitted" (during verification, not by the verifier)
	// or "sealed" (after Seal).
	Phase string
	// Op is what the process did: "opened", "created", "deleted",
	// "moved away", "moved in", "wrote", "changed attributes of", ...
	Op string
}

// AdmitFunc decides whether the process pid (host pid namespace, blocked in
// open(2) while the decision is made) belongs to the verifier's run.
type AdmitFunc func(pid int) bool
