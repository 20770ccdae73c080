package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
)

// needConfinement skips (locally) or fails (CI) unless this host lets the
// sandbox enforce per-session memory, process and disk limits (root with
// writable cgroups).
func needConfinement(t *testing.T) (Bubblewrap, *Confinement) {
	t.Helper()
	b := needBwrap(t)
	c := DetectConfinement()
	mem, pids, _, disk := c.Enforced()
	if !mem || !pids || !disk {
		testenv.Unavailable(t, "per-session limits not enforceable here: %s", c.Describe())
	}
	b.Confine = c
	return b, c
}

func TestDescribeNamesWhatIsNotEnforced(t *testing.T) {
	var none *Confinement
	if d := none.Describe(); !strings.Contains(d, "none enforced") || !strings.Contains(d, "NOT enforced: memory, processes, cpu, workspace disk") {
		t.Errorf("nil confinement: %q", d)
	}
	dir := t.TempDir()
	self := filepath.Join(dir, "cgroup")
	os.WriteFile(self, []byte("4:memory:/a\n"), 0o644)
	c := detectConfinement(filepath.Join(dir, "nocgroups"), self)
	d := c.Describe()
	for _, want := range []string{"NOT enforced", "memory", "processes", "cpu", "not mounted"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() = %q, missing %q", d, want)
		}
	}
	t.Logf("this host: %s", DetectConfinement().Describe())
}

func TestOwnCgroups(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cgroup")
	os.WriteFile(p, []byte("9:name=systemd:/\n8:pids:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/c\n0::/u\n"), 0o644)
	got, err := ownCgroups(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pids": "/", "memory": "/process_api/x", "cpu": "/c", "cpuacct": "/c", "": "/u", "name=systemd": "/"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: got %q want %q", k, got[k], v)
		}
	}
}

// TestSessionMemoryAcrossProcesses: four processes of 150 MB each stay
// under a 1 GiB per-process address-space limit, but not under a 256 MiB
// session limit: the cgroup kills some. With rlimits alone all four live.
func TestSessionMemoryAcrossProcesses(t *testing.T) {
	b, _ := needConfinement(t)
	s, _ := startSession(t, b, Limits{MemoryBytes: 1 << 30, SessionMemoryBytes: 256 << 20})
	r := mustExec(t, s, `for i in 1 2 3 4; do (python3 -c 'import time; b = bytearray(150 << 20); time.sleep(2)' && echo survived) & done; wait`, time.Minute)
	n := strings.Count(r.Output, "survived")
	if n >= 4 {
		t.Fatalf("all 4 processes of 150 MB survived a 256 MiB session limit:\n%s", r.Output)
	}
	if n < 1 {
		t.Fatalf("no process survived (one 150 MB process fits in 256 MiB):\n%s", r.Output)
	}
}

// TestSessionCgroupLimits: the session's cgroup carries its limits, and
// the sandbox's processes are in it.
func TestSessionCgroupLimits(t *testing.T) {
	b, c := needConfinement(t)
	s, _ := startSession(t, b, Limits{Processes: 40, SessionMemoryBytes: 300 << 20, CPUs: 0.5})
	mustExec(t, s, "sleep 30 &", 10*time.Second)
	l := s.(*shellSession).l.(*bwrapLauncher)
	if len(l.cg.pids()) < 3 { // sh→bwrap, its namespace init, bash, sleep
		t.Errorf("cgroup holds %v: the sandbox did not enter it", l.cg.pids())
	}
	want := map[string]string{"pids.max": "40", "memory.limit_in_bytes": strconv.Itoa(300 << 20), "memory.max": strconv.Itoa(300 << 20),
		"cpu.cfs_quota_us": "50000", "cpu.max": "50000 100000"}
	found := 0
	for _, d := range l.cg.dirs {
		for f, v := range want {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				found++
				if strings.TrimSpace(string(b)) != v {
					t.Errorf("%s/%s = %q, want %s", d, f, strings.TrimSpace(string(b)), v)
				}
			}
		}
	}
	if _, _, cpu, _ := c.Enforced(); found < 2 || (cpu && found < 3) {
		t.Errorf("only %d limit files found in %v", found, l.cg.dirs)
	}
}

// TestCloseLeavesNoProcess: a daemon that detaches (setsid, nohup, its
// own process group) is dead when Close returns, with cgroups and without.
func TestCloseLeavesNoProcess(t *testing.T) {
	for _, confined := range []bool{false, true} {
		t.Run("cgroup="+strconv.FormatBool(confined), func(t *testing.T) {
			b := needBwrap(t)
			if confined {
				b, _ = needConfinement(t)
			}
			dir := tempDir(t)
			s, err := b.Start(context.Background(), Spec{Workdir: dir})
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, s, `setsid nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /app/beat; done' >/dev/null 2>&1 &`, 10*time.Second)
			time.Sleep(100 * time.Millisecond)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			before, _ := os.ReadFile(filepath.Join(dir, "beat"))
			time.Sleep(200 * time.Millisecond)
			after, _ := os.ReadFile(filepath.Join(dir, "beat"))
			if string(before) != string(after) {
				t.Fatalf("a sandboxed daemon still writes after Close: %q then %q", before, after)
			}
			if confined {
				l := s.(*shellSession).l.(*bwrapLauncher)
				for _, d := range l.cg.dirs {
					if _, err := os.Stat(d); err == nil {
						t.Errorf("cgroup %s left behind", d)
					}
				}
			}
		})
	}
}

// TestWorkspaceDiskLimit: three processes writing 40 MB each into a 64 MiB
// workspace fill it and no more; RLIMIT_FSIZE alone (per file) lets all
// three through.
func TestWorkspaceDiskLimit(t *testing.T) {
	b, c := needConfinement(t)
	dir := tempDir(t)
	unmount, err := c.MountWorkspace(dir, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer unmount()
	s, err := b.Start(context.Background(), Spec{Workdir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustExec(t, s, `for i in 1 2 3; do (head -c 40000000 /dev/zero > /app/f$i || echo "write $i failed") & done; wait; du -sk /app`, time.Minute)
	if !strings.Contains(r.Output, "failed") {
		t.Fatalf("three 40 MB files fit in a 64 MiB workspace:\n%s", r.Output)
	}
	var total int64
	for i := 1; i <= 3; i++ {
		if fi, err := os.Stat(filepath.Join(dir, "f"+strconv.Itoa(i))); err == nil {
			total += fi.Size()
		}
	}
	if total > 64<<20 {
		t.Fatalf("workspace holds %d bytes, limit %d", total, 64<<20)
	}
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
}
