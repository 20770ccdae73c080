package sandbox

import "testing"

// fakeProcs is a /proc snapshot; after, when set, changes it once the scan
// has read pid's parent (a parent reaped mid-scan).
type fakeProcs struct {
	nsOf   map[int]string
	parent map[int]int
	sidOf  map[int]int
	commOf map[int]string
	env    map[int]string
	onStat func(pid int) // called after each stat
}

func (f *fakeProcs) pids() []int {
	var out []int
	for p := range f.nsOf {
		out = append(out, p)
	}
	return out
}
func (f *fakeProcs) ns(pid int) string { return f.nsOf[pid] }
func (f *fakeProcs) stat(pid int) (int, int, bool) {
	pp, ok := f.parent[pid]
	if f.onStat != nil {
		defer f.onStat(pid)
	}
	return pp, f.sidOf[pid], ok
}
func (f *fakeProcs) comm(pid int) string    { return f.commOf[pid] }
func (f *fakeProcs) environ(pid int) []byte { return []byte(f.env[pid]) }

// A container (init 100, namespace "c") with a real exec leader 200 (its
// parent 50 is the runtime, outside) and a process 300 of the container
// named bash leading its own session, whose parent 250 (inside) is reaped
// while the scan reads it: its namespace then reads as "" (gone). Only 200
// is an exec leader (before: 300 was admitted too, and with it the
// verifier's files), and findLeader takes the one carrying the host's token.
func TestExecLeaderParentReapedMidScan(t *testing.T) {
	f := &fakeProcs{
		nsOf:   map[int]string{1: "host", 50: "host", 100: "c", 200: "c", 250: "c", 300: "c"},
		parent: map[int]int{50: 1, 100: 50, 200: 50, 250: 100, 300: 250},
		sidOf:  map[int]int{200: 200, 300: 300},
		commOf: map[int]string{200: "bash", 300: "bash"},
		env:    map[int]string{200: "PATH=/bin\x00" + ExecTokenEnv + "=secret\x00", 300: "PATH=/bin\x00"},
	}
	f.onStat = func(pid int) {
		if pid == 300 && f.nsOf[250] != "" {
			delete(f.nsOf, 250) // reaped: /proc/250 is gone
			f.parent[300] = 100 // re-parented to the container's init
		}
	}
	leaders := execLeadersIn(f, 100)
	if !leaders[200] || leaders[300] || len(leaders) != 1 {
		t.Fatalf("exec leaders %v: want only 200", leaders)
	}
	if pid := findLeader(f, 100, nil, "bash", "secret"); pid != 200 {
		t.Fatalf("findLeader = %d, want 200", pid)
	}
	// A process of the container that does pass the parent test (say a
	// parent outside it still alive) but lacks the token is not the
	// verifier's exec.
	f.parent[300], f.nsOf[250] = 50, "host"
	if pid := findLeader(f, 100, map[int]bool{200: true}, "bash", "secret"); pid != 0 {
		t.Fatalf("findLeader took %d without the token", pid)
	}
	if !hasToken([]byte("A=1\x00"+ExecTokenEnv+"=secret\x00"), "secret") || hasToken([]byte(ExecTokenEnv+"=secret2"), "secret") || hasToken(nil, "secret") {
		t.Error("hasToken")
	}
}
