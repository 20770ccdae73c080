package swebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/compactrl/compactrl/sandbox"
)

// Errors of container mode that are the environment's, not the patch's:
// an instance that meets one is refused (skipped) or its episode is an
// infra_error, never a reward of 0.
var (
	// ErrNoEngine marks a container engine that does not answer.
	ErrNoEngine = errors.New("no container engine")
	// ErrImageMissing marks an instance none of whose images is in the
	// engine's store.
	ErrImageMissing = errors.New("instance image missing")
)

// DefaultEvalTimeout bounds the eval script, as the harness's --timeout
// default (run_evaluation.py) does.
const DefaultEvalTimeout = 1800 * time.Second

// maxLogBytes bounds the test log read back from the grading container; a
// longer log is cut, and so lacks the end marker and grades as no output.
const maxLogBytes = 64 << 20

// gitApplyCmds are the harness's GIT_APPLY_CMDS (run_evaluation.py), tried
// in order in /testbed on the model's patch.
var gitApplyCmds = []string{
	"git apply --verbose",
	"git apply --verbose --reject",
	"patch --batch --fuzz=5 -p1 -i",
}

// activate is what the harness's images run before anything of the
// repository (its eval script's first lines; the image's .bashrc does the
// same through conda.sh): the testbed conda environment, where the image
// has conda.
const activate = `if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate && conda activate ` + envName + `; fi`

// ResolveImage is the first of ImageCandidates(inst, override, namespace)
// present in c's store. With none present the error wraps ErrImageMissing
// and names every image tried; an engine that does not answer, ErrNoEngine.
func ResolveImage(ctx context.Context, c sandbox.Container, inst *Instance, override, namespace string) (string, error) {
	if err := c.Available(ctx); err != nil {
		return "", fmt.Errorf("instance %s: %w: %w", inst.InstanceID, ErrNoEngine, err)
	}
	cands := ImageCandidates(inst, override, namespace)
	for _, ref := range cands {
		if _, err := c.InspectImage(ctx, ref); err == nil {
			return ref, nil
		}
	}
	return "", fmt.Errorf("instance %s: %w: none of %s is in %s's store (pull or build the harness's image, or name one with --image-map)",
		inst.InstanceID, ErrImageMissing, strings.Join(cands, ", "), c.Name())
}

// containerBackend runs episodes in container mode: the agent in a
// container of the instance's image, the grading in a fresh one.
type containerBackend struct {
	e     *Env
	c     sandbox.Container
	image string
	box   *sandbox.Box // the agent's container, until the patch is taken
	head  string       // /testbed's HEAD when the agent started
}

// admit refuses an instance without a harness spec (EvalScript) or whose
// image none of ImageCandidates finds (o.Image: an --image-map entry), and
// sets o.Image to the image found.
func (cb *containerBackend) admit(ctx context.Context, o *Options) error {
	inst := &cb.e.inst
	if _, err := EvalScript(inst); err != nil {
		return err
	}
	image, err := ResolveImage(ctx, cb.c, inst, o.Image, o.Namespace)
	if err != nil {
		return err
	}
	o.Image = image
	return nil
}

func (e *Env) boxSpec(image string) sandbox.BoxSpec {
	// The harness's containers keep the image's /tmp (no tmpfs).
	return sandbox.BoxSpec{Image: image, Workdir: Testbed, Limits: e.opts.Limits, Network: e.opts.Network, NoTmpfs: true}
}

// start starts the episode in the instance's image: a container whose
// /testbed is the repository at base_commit with the instance's
// environment installed, and the agent's shell in /testbed with the
// testbed environment active.
func (ep *containerBackend) start(ctx context.Context) (string, error) {
	e, c := ep.e, ep.c
	id := e.inst.InstanceID
	if _, err := EvalScript(&e.inst); err != nil {
		return "", err
	}
	if RepoParser(e.inst.Repo) == nil {
		return "", fmt.Errorf("instance %s: %w: no log parser for repository %q", id, ErrNoHarnessSpec, e.inst.Repo)
	}
	if _, err := e.sh.MakeWorkspace(e.opts.WorkRoot, "swebench-"+safeName(id)+"-", 0); err != nil {
		return "", err
	}
	image, err := ResolveImage(ctx, c, &e.inst, e.opts.Image, e.opts.Namespace)
	if err != nil {
		return "", err
	}
	ep.image = image
	begin := time.Now()
	if ep.box, err = c.Create(ctx, e.boxSpec(image)); err != nil {
		return "", fmt.Errorf("instance %s: image %s: %w", id, image, err)
	}
	out, code, err := ep.box.Run(ctx, sandbox.ExecSpec{Workdir: Testbed, Cmd: []string{"git", "-c", "safe.directory=*", "rev-parse", "HEAD"}})
	if err != nil || code != 0 {
		return "", fmt.Errorf("instance %s: image %s has no git repository at %s (exit %d): %v %s", id, image, Testbed, code, err, tailString(out, 500))
	}
	ep.head = strings.TrimSpace(out)
	sess, err := ep.box.Shell(ctx, sandbox.ExecSpec{Workdir: Testbed}, e.opts.Limits)
	if err != nil {
		return "", fmt.Errorf("instance %s: agent shell: %w", id, err)
	}
	r, err := sess.Exec(ctx, activate, 2*time.Minute)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, tailString(r.Output, 1000))
	}
	if err != nil {
		sess.Close()
		return "", fmt.Errorf("instance %s: activate the testbed environment in %s: %w", id, image, err)
	}
	e.sh.StartSession(sess, e.opts.AgentTimeout)
	e.sh.SetMetric(metricContainerStartSeconds, time.Since(begin).Seconds())
	return Testbed, nil
}

// containerDiff is the agent's change in its container: every file of
// /testbed against the commit it started from (git add -A on a temporary
// index, so new files count, .gitignore'd ones do not; commits the agent
// made count too), as a text diff. Binary files are left out, as a text
// `git diff` (what the harness's agents submit) cannot carry them; their
// names are returned. git runs in the agent's container, where whatever
// the agent left in .git can only spoil its own patch.
func (ep *containerBackend) containerDiff(ctx context.Context) (patch string, binary []string, err error) {
	e := ep.e
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	script := `set -e; cd ` + Testbed + `; export GIT_INDEX_FILE=/tmp/compactrl-diff.index; rm -f "$GIT_INDEX_FILE"
g() { git -c safe.directory='*' -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.fileMode=false "$@"; }
g read-tree ` + sandbox.ShellQuote(ep.head) + `; g add -A; g diff --cached --no-color --no-ext-diff --no-textconv ` + sandbox.ShellQuote(ep.head) + ` > /tmp/compactrl-model.patch
stat -c %s /tmp/compactrl-model.patch`
	out, code, err := ep.box.Run(ctx, sandbox.ExecSpec{User: "0", Cmd: []string{"bash", "-c", script}})
	if err != nil {
		return "", nil, fmt.Errorf("git diff in the agent's container: %w", err)
	}
	if code != 0 {
		e.sh.SetMetric(metricPatchError, 1)
		return "", nil, nil
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	size, _ := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if size > maxPatchBytes {
		e.sh.SetMetric(metricPatchError, 1)
		return "", nil, nil
	}
	out, code, err = ep.box.Run(ctx, sandbox.ExecSpec{User: "0", Cmd: []string{"head", "-c", strconv.Itoa(maxPatchBytes), "/tmp/compactrl-model.patch"}})
	if err != nil || code != 0 {
		return "", nil, fmt.Errorf("read the patch in the agent's container (exit %d): %v", code, err)
	}
	patch, binary = dropBinary(out)
	return patch, binary, nil
}

// dropBinary removes the files of a git diff that have no text hunks
// ("Binary files … differ", "GIT binary patch") and returns their names.
func dropBinary(patch string) (string, []string) {
	if !strings.Contains(patch, "Binary files ") && !strings.Contains(patch, "GIT binary patch") {
		return patch, nil
	}
	var keep strings.Builder
	var binary []string
	for _, sec := range splitDiff(patch) {
		isBin := false
		for _, l := range strings.Split(sec, "\n") {
			if strings.HasPrefix(l, "@@") {
				break
			}
			if (strings.HasPrefix(l, "Binary files ") && strings.HasSuffix(l, " differ")) || l == "GIT binary patch" {
				isBin = true
				break
			}
		}
		if isBin {
			name := sec
			if m := gitHeaderRe.FindStringSubmatch(strings.SplitN(sec, "\n", 2)[0]); m != nil {
				name = m[2]
			}
			binary = append(binary, name)
			continue
		}
		keep.WriteString(sec)
	}
	return keep.String(), binary
}

// splitDiff cuts a git diff before each "diff --git" line.
func splitDiff(patch string) []string {
	var out []string
	start := 0
	for i := 0; i < len(patch); {
		j := strings.IndexByte(patch[i:], '\n')
		next := len(patch)
		if j >= 0 {
			next = i + j + 1
		}
		if i > start && strings.HasPrefix(patch[i:], "diff --git ") {
			out = append(out, patch[start:i])
			start = i
		}
		i = next
	}
	return append(out, patch[start:])
}

// grade takes the model's patch (the submitting reply's ```diff block,
// else the agent's diff), removes the agent's container and grades the
// patch in a fresh one.
func (ep *containerBackend) grade(ctx context.Context, patch string) (Report, error) {
	rep := Report{Mode: "container", Image: ep.image}
	if patch == "" {
		var err error
		if patch, rep.BinaryExcluded, err = ep.containerDiff(ctx); err != nil {
			return rep, err
		}
	}
	if err := ep.box.Remove(); err != nil {
		return rep, fmt.Errorf("remove the agent's container: %w", err)
	}
	ep.box = nil
	return ep.gradeContainer(ctx, rep, patch)
}

// gradeContainer is the harness's run_instance on a fresh container of
// the instance's image: the patch at /tmp/patch.diff applied in /testbed
// by the first of its apply commands that works, the eval script run and
// its output graded (GradeLog). The verdict is the parsed per-test
// statuses, never an exit status. An empty patch is not applied (the
// harness skips empty predictions); its tests still run, for the record,
// and it resolves nothing.
func (ep *containerBackend) gradeContainer(ctx context.Context, rep Report, patch string) (Report, error) {
	e := ep.e
	rep.PatchBytes = len(patch)
	rep.FailToPass, rep.PassToPass = map[string]bool{}, map[string]bool{}
	script, err := EvalScript(&e.inst)
	if err != nil {
		return rep, err
	}
	in, err := sandbox.MkdirTemp(e.sh.Workspace(), "eval-")
	if err != nil {
		return rep, err
	}
	for name, body := range map[string]string{"patch.diff": patch, "eval.sh": script} {
		if err := os.WriteFile(filepath.Join(in, name), []byte(body), 0o644); err != nil {
			return rep, err
		}
	}
	box, err := ep.c.Create(ctx, e.boxSpec(ep.image))
	if err != nil {
		return rep, fmt.Errorf("grading container from %s: %w", ep.image, err)
	}
	defer box.Remove()
	if err := box.CopyIn(ctx, in, "/tmp"); err != nil {
		return rep, err
	}
	root := func(cmd string) sandbox.ExecSpec {
		return sandbox.ExecSpec{User: "0", Workdir: Testbed, Cmd: []string{"bash", "-c", cmd}}
	}
	empty := strings.TrimSpace(patch) == ""
	if !empty {
		for _, c := range gitApplyCmds {
			_, code, err := box.Run(ctx, root(c+" /tmp/patch.diff"))
			if err != nil {
				return rep, fmt.Errorf("apply the patch: %w", err)
			}
			if code == 0 {
				rep.PatchApplied, rep.ApplyMethod = true, c
				break
			}
		}
		if !rep.PatchApplied {
			e.sh.SetMetric(metricPatchApplied, 0)
			rep.Resolution, rep.Note = ResolvedNo, applyPatchFail
			e.setVerdictMetrics(rep)
			return rep, nil
		}
	}
	e.sh.SetMetric(metricPatchApplied, boolMetric(rep.PatchApplied))
	timeout := e.opts.EvalTimeout
	if timeout <= 0 {
		timeout = DefaultEvalTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	begin := time.Now()
	log, _, err := box.Run(rctx, root("/bin/bash /tmp/eval.sh 2>&1 | head -c "+strconv.Itoa(maxLogBytes)))
	cancel()
	e.sh.SetMetric(metricTestSeconds, time.Since(begin).Seconds())
	if err != nil && ctx.Err() == nil && rctx.Err() == context.DeadlineExceeded {
		rep.TimedOut = true
		log += "\n\nTimeout error: " + strconv.Itoa(int(timeout.Seconds())) + " seconds exceeded."
		err = nil
	}
	if err != nil {
		return rep, fmt.Errorf("eval script: %w", err)
	}
	rep.Log = log
	status, tests, found := GradeLog(&e.inst, log)
	rep.LogFound, rep.TestStatus = found, status
	switch {
	case rep.TimedOut:
		// The harness raises on a timeout: no report, not resolved.
		rep.Resolution, rep.Note = ResolvedNo, testsTimeout
	case !found:
		rep.Resolution, rep.Note = ResolvedNo, "no test output the harness would grade (markers missing, or a failure marker in the log)"
	default:
		rep.Tests = &tests
		rep.Resolution = tests.Resolution()
		for _, id := range tests.FailToPass.Success {
			rep.FailToPass[id] = true
		}
		for _, id := range tests.FailToPass.Failure {
			rep.FailToPass[id] = false
		}
		for _, id := range tests.PassToPass.Success {
			rep.PassToPass[id] = true
		}
		for _, id := range tests.PassToPass.Failure {
			rep.PassToPass[id] = false
		}
	}
	rep.Resolved = rep.Resolution == ResolvedFull && !empty
	if empty {
		rep.Note = strings.TrimSpace(rep.Note + " empty patch: not evaluated by the harness, resolves nothing (tests run for the record: " + rep.Resolution + ")")
	}
	e.setVerdictMetrics(rep)
	return rep, nil
}

func (e *Env) setVerdictMetrics(rep Report) {
	f2p, p2p := 0, 0
	if rep.Tests != nil {
		f2p, p2p = len(rep.Tests.FailToPass.Success), len(rep.Tests.PassToPass.Success)
	}
	e.sh.SetMetric(metricF2PPassed, float64(f2p))
	e.sh.SetMetric(metricF2PTotal, float64(len(e.inst.FailToPass)))
	e.sh.SetMetric(metricP2PPassed, float64(p2p))
	e.sh.SetMetric(metricP2PTotal, float64(len(e.inst.PassToPass)))
	e.sh.SetMetric(metricResolved, boolMetric(rep.Resolved))
	if len(rep.BinaryExcluded) > 0 {
		e.sh.SetMetric(metricBinaryFilesExcluded, float64(len(rep.BinaryExcluded)))
	}
}

func boolMetric(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// close removes the agent's container if it is still there.
func (ep *containerBackend) close() error {
	if ep.box == nil {
		return nil
	}
	err := ep.box.Remove()
	ep.box = nil
	return err
}
