package swebench

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"github.com/compactrl/compactrl/env/tasks"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/sandbox"
)

// Options configure an Env. Zero values take the documented defaults.
type Options struct {
	// Sandboxing: Runner is the host sandbox of the local-repository mode
	// (default sandbox.Bubblewrap{}); Engine selects container mode (the
	// instance's image, the harness's eval script and grading).
	// CommandTimeout defaults to shelltask.DefaultCommandTimeout,
	// AgentTimeout (the whole agent phase) to 30 min.
	tasks.Sandboxing
	// Image is the instance's image in container mode (an --image-map
	// entry); "" tries ImageCandidates.
	Image string
	// Namespace of the harness's image names (default DefaultNamespace;
	// "none": the names of images the harness built locally).
	Namespace string
	// EvalTimeout bounds the eval script in container mode; default
	// DefaultEvalTimeout.
	EvalTimeout time.Duration
	// ReposDir holds the local repositories: an instance's repository is
	// its repo_path, else ReposDir/<owner>__<name>, ReposDir/<owner>/<name>
	// or ReposDir/<name>, the first that is a git repository.
	ReposDir    string
	TestTimeout time.Duration // local mode: per test id; default 300 s
	WorkRoot    string        // parent of the workspaces; default os.TempDir()
	// FormatHint, if set, replaces shelltask.FormatHint() as the text
	// appended to the task.
	FormatHint string
	// TaskTemplate, if set, replaces the embedded prompts/task.tmpl: a text/template
	// over TaskData that renders the task shown to the policy (before the
	// format hint).
	TaskTemplate string
}

// Report is the verdict of one evaluation.
type Report struct {
	Mode         string `json:"mode"`            // "container" or "local"
	Image        string `json:"image,omitempty"` // container mode
	PatchApplied bool   `json:"patch_applied"`
	ApplyMethod  string `json:"apply_method,omitempty"`
	PatchBytes   int    `json:"patch_bytes"`
	// BinaryExcluded are files of the agent's change left out of the patch
	// (binary; container mode).
	BinaryExcluded []string `json:"binary_excluded,omitempty"`
	// FailToPass and PassToPass: true for a test that succeeded, false for
	// one that failed; in container mode a test the harness grades as
	// neither (skipped) is absent.
	FailToPass map[string]bool `json:"fail_to_pass"`
	PassToPass map[string]bool `json:"pass_to_pass"`
	Resolved   bool            `json:"resolved"`

	// Container mode: the harness's resolution status, whether the log had
	// test output it grades, the per-test statuses the repository's log
	// parser read, the graded lists, the test log, and why a patch
	// resolved nothing when it is not the tests (a patch that did not
	// apply, a timeout, an empty patch).
	Resolution string            `json:"resolution,omitempty"`
	LogFound   bool              `json:"log_found,omitempty"`
	TimedOut   bool              `json:"timed_out,omitempty"`
	TestStatus map[string]string `json:"test_status,omitempty"`
	Tests      *TestsReport      `json:"tests_status,omitempty"`
	Note       string            `json:"note,omitempty"`
	Log        string            `json:"-"`
}

// Env is one SWE-bench instance as an agent.Environment (one Env per
// episode; not safe for concurrent use).
type Env struct {
	inst Instance
	opts Options
	sh   *shelltask.Shell // workspace (app/ and the evaluation's), agent shell, metrics

	back   backend // where the episodes run, chosen by New
	report Report
}

var (
	_ agent.Environment     = (*Env)(nil)
	_ agent.MetricsReporter = (*Env)(nil)
)

// New returns an Env for inst.
func New(inst Instance, opts Options) *Env {
	if opts.AgentTimeout <= 0 {
		opts.AgentTimeout = 30 * time.Minute
	}
	if opts.TestTimeout <= 0 {
		opts.TestTimeout = 300 * time.Second
	}
	sh := shelltask.NewShell(shelltask.Config{
		Name: "instance " + inst.InstanceID, Runner: opts.Runner, CommandTimeout: opts.CommandTimeout,
		KeepWorkspace: opts.KeepWorkspace,
		PatchOnly:     errors.New("a ```diff block alone does nothing: add <submit/> to submit it as your patch"),
		TimeUpNote:    "The agent's time limit was reached.",
	})
	e := &Env{inst: inst, opts: opts, sh: sh}
	e.back = newBackend(e)
	return e
}

// RepoDir resolves the instance's local repository (see Options.ReposDir).
func RepoDir(inst *Instance, reposDir string) (string, error) {
	var cands []string
	if inst.RepoPath != "" {
		p := inst.RepoPath
		if !filepath.IsAbs(p) {
			p = filepath.Join(reposDir, p)
		}
		cands = append(cands, p)
	} else {
		owner, name, _ := strings.Cut(inst.Repo, "/")
		if name == "" {
			name, owner = owner, ""
		}
		if owner != "" {
			cands = append(cands, filepath.Join(reposDir, owner+"__"+name), filepath.Join(reposDir, owner, name))
		}
		cands = append(cands, filepath.Join(reposDir, name))
	}
	for _, c := range cands {
		if _, err := os.Stat(filepath.Join(c, ".git")); err == nil {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("instance %s: no local git repository for %q (tried %s)", inst.InstanceID, inst.Repo, strings.Join(cands, ", "))
}

// git runs git on the host in dir. It is only ever used on repositories
// the agent has not touched (the source, fresh checkouts): an agent
// controls its workspace's .git, and git would run what that names.
func git(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "user.name=compactrl", "-c", "user.email=compactrl@localhost", "-c", "advice.detachedHead=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// checkout makes dst a repository holding commit and its ancestors only
// (fetched by id from src, no refs, no tags), checked out detached: the
// agent keeps the history up to base_commit but cannot find later commits,
// which would leak the fix.
func checkout(ctx context.Context, src, dst, commit string) error {
	if _, err := git(ctx, filepath.Dir(dst), nil, "init", "-q", dst); err != nil {
		return err
	}
	if _, err := git(ctx, dst, nil, "-c", "safe.directory="+src, "-c", "uploadpack.allowAnySHA1InWant=true", "fetch", "-q", "--no-tags", "file://"+src, commit); err != nil {
		return err
	}
	if _, err := git(ctx, dst, nil, "checkout", "-q", "--detach", commit); err != nil {
		return err
	}
	return os.Remove(filepath.Join(dst, ".git", "FETCH_HEAD"))
}

// Reset implements agent.Environment.
func (e *Env) Reset(ctx context.Context) (string, error) {
	if err := e.Close(); err != nil {
		return "", fmt.Errorf("instance %s: previous episode: %w", e.inst.InstanceID, err)
	}
	e.report = Report{}
	workdir, err := e.back.start(ctx)
	if err != nil {
		return "", err
	}
	task, err := e.task(workdir)
	if err != nil {
		return "", fmt.Errorf("instance %s: %w", e.inst.InstanceID, err)
	}
	if !e.opts.NoFormatHint {
		task += "\n\n" + cmp.Or(e.opts.FormatHint, shelltask.FormatHint())
	}
	return task, nil
}

// LocalRefusal says why the local-repository mode cannot grade inst: it
// runs each test id on the host's tools in a bubblewrap sandbox and takes
// its exit status as the verdict, so it matches neither the per-instance
// environment (Python version, installed dependencies, compiled code) nor
// the test runner and log grading of the official harness. An instance of
// a repository the harness knows (Django and SymPy, whose runners it
// cannot run at all, among them) must run in container mode; nil for
// other repositories, or an instance that names its own test_cmd.
func LocalRefusal(inst *Instance) error {
	if inst.TestCmd != "" || ParserName(inst.Repo) == "" {
		return nil
	}
	why := "its environment (the instance's image) and the harness's test command and log grading"
	switch inst.Repo {
	case "django/django":
		why = "Django's tests/runtests.py in the instance's environment, graded from its log"
	case "sympy/sympy":
		why = "SymPy's bin/test in the instance's environment, graded from its log"
	}
	return fmt.Errorf("instance %s: %s is an official SWE-bench repository; grading it needs %s, which the local-repository mode cannot reproduce: run it with --runner podman (or docker) and the instance's image", inst.InstanceID, inst.Repo, why)
}

// start starts the local-repository mode's episode: a clone of the local
// repository at base_commit, the agent at /app.
func (l *localBackend) start(ctx context.Context) (string, error) {
	e := l.e
	if err := LocalRefusal(&e.inst); err != nil {
		return "", err
	}
	src, err := RepoDir(&e.inst, e.opts.ReposDir)
	if err != nil {
		return "", err
	}
	l.src = src
	disk := e.opts.Limits.DiskBytes
	if disk == 0 {
		disk = sandbox.DefaultLimits().DiskBytes
	}
	ws, err := e.sh.MakeWorkspace(e.opts.WorkRoot, "swebench-"+safeName(e.inst.InstanceID)+"-", disk)
	if err != nil {
		return "", err
	}
	app := filepath.Join(ws, "app")
	if err := checkout(ctx, src, app, e.inst.BaseCommit); err != nil {
		return "", fmt.Errorf("instance %s: %w", e.inst.InstanceID, err)
	}
	return sandbox.AppDir, e.sh.Start(ctx, sandbox.Spec{Workdir: app, Mounts: shelltask.CacheMounts(e.opts.CacheDir), Env: e.env(), Limits: e.opts.Limits, Network: e.opts.Network}, e.opts.AgentTimeout)
}

// taskFile is the task template, prompts/task.tmpl; the file ends with
// one newline, which is not part of the template.
//
//go:embed prompts/task.tmpl
var taskFile string

// TaskData is what the task template (prompts/task.tmpl, or
// Options.TaskTemplate) renders.
type TaskData struct {
	// ProblemStatement is the instance's, surrounding white space trimmed.
	ProblemStatement string
	Repo             string // owner/name
	Commit           string // base_commit, its first 12 characters
	// Workdir is where the agent finds the repository: /testbed in
	// container mode, /app in the local-repository mode.
	Workdir string
}

// task renders the task template for the instance.
func (e *Env) task(workdir string) (string, error) {
	src := cmp.Or(e.opts.TaskTemplate, strings.TrimSuffix(taskFile, "\n"))
	t, err := template.New("task").Parse(src)
	if err != nil {
		return "", fmt.Errorf("task template: %w", err)
	}
	short := e.inst.BaseCommit
	if len(short) > 12 {
		short = short[:12]
	}
	var b strings.Builder
	if err := t.Execute(&b, TaskData{strings.TrimSpace(e.inst.ProblemStatement), e.inst.Repo, short, workdir}); err != nil {
		return "", fmt.Errorf("task template: %w", err)
	}
	return b.String(), nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

func (e *Env) env() map[string]string { return shelltask.CacheEnv(e.opts.CacheDir, nil) }

// Step implements agent.Environment: shelltask.Shell.Step, with the
// evaluation on submit. A ```diff block in the submitting reply is the
// patch; without one, the workspace's changes are.
func (e *Env) Step(ctx context.Context, reply string) (agent.Step, error) {
	return e.sh.Step(ctx, reply, e.finish)
}

// finish evaluates the patch once the agent phase has ended (the agent's
// sandbox closed: nothing of the agent can still write the workspace).
func (e *Env) finish(ctx context.Context, a shelltask.Action, obs string) (agent.Step, error) {
	defer e.sh.Cleanup()
	rep, err := e.back.grade(ctx, a.Patch)
	if err != nil {
		return agent.Step{}, fmt.Errorf("instance %s: %w", e.inst.InstanceID, err)
	}
	return e.verdict(rep, obs), nil
}

// grade is the local-repository mode's verdict on patch ("": the agent's
// changes to its workspace).
func (l *localBackend) grade(ctx context.Context, patch string) (Report, error) {
	if patch == "" {
		var err error
		if patch, err = l.workspaceDiff(ctx); err != nil {
			return Report{}, fmt.Errorf("model patch: %w", err)
		}
	}
	rep, err := l.evaluate(ctx, patch)
	rep.Mode = "local"
	return rep, err
}

// verdict records rep and ends the episode: reward 1 when resolved.
func (e *Env) verdict(rep Report, obs string) agent.Step {
	e.report = rep
	if obs != "" {
		obs += "\n"
	}
	obs += fmt.Sprintf("[submitted; resolved: %v]", rep.Resolved)
	if rep.Resolution != "" {
		obs += fmt.Sprintf("\n[%s; FAIL_TO_PASS %s; PASS_TO_PASS %s]", rep.Resolution, count(rep.FailToPass, len(e.inst.FailToPass)), count(rep.PassToPass, len(e.inst.PassToPass)))
	}
	if rep.Note != "" {
		obs += "\n[" + rep.Note + "]"
	}
	return agent.Step{Done: true, Reward: float64(boolMetric(rep.Resolved)), Observation: obs}
}

// count is "passed/total" of a graded list, with the failures named.
func count(m map[string]bool, total int) string {
	passed := 0
	var failed []string
	for id, ok := range m {
		if ok {
			passed++
		} else {
			failed = append(failed, id)
		}
	}
	s := fmt.Sprintf("%d/%d", passed, total)
	if len(failed) > 0 {
		sort.Strings(failed)
		s += " failing: " + truncate(strings.Join(failed, ", "), 400)
	}
	return s
}

// maxPatchBytes bounds the model's patch.
const maxPatchBytes = 64 << 20

// workspaceDiff is the agent's change: `git diff --binary base` over a
// temporary index holding every file (untracked included, .gitignore
// respected). It runs in a fresh sandbox, never on the host: the agent
// controls the workspace's .git (config, hooks, filters, fsmonitor), and
// git on the host would run whatever it names. A workspace whose git no
// longer works yields an empty patch (metric patch_error = 1).
func (l *localBackend) workspaceDiff(ctx context.Context) (string, error) {
	e := l.e
	ws := e.sh.Workspace()
	out := filepath.Join(ws, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return "", err
	}
	sess, err := l.runner.Start(ctx, sandbox.Spec{Workdir: filepath.Join(ws, "app"),
		Mounts: []sandbox.Mount{{Host: out, Target: "/out", Writable: true}}, Limits: e.opts.Limits})
	if err != nil {
		return "", fmt.Errorf("start diff sandbox: %w", err)
	}
	base := sandbox.ShellQuote(e.inst.BaseCommit)
	r, err := sess.Exec(ctx, "export GIT_INDEX_FILE=/tmp/compactrl-diff.index && git read-tree "+base+
		" && git add -A && git diff --cached --binary "+base+" > /out/model.patch", 10*time.Minute)
	// git runs what the agent's .git names (hooks, fsmonitor): the patch is
	// read only once nothing of that can still write it.
	if cerr := sess.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("diff sandbox not contained: %w", cerr)
	}
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		e.sh.SetMetric(metricPatchError, 1)
		return "", nil
	}
	b, err := sandbox.ReadRegular(filepath.Join(out, "model.patch"), maxPatchBytes)
	if err != nil {
		e.sh.SetMetric(metricPatchError, 1)
		return "", nil
	}
	return string(b), nil
}

// applyCmds are the patch fallbacks of SWE-bench's harness, run in /app.
func applyCmds(patchFile string) []string {
	q := sandbox.ShellQuote(patchFile)
	return []string{
		"git apply --verbose " + q,
		"git apply --verbose --3way " + q,
		"patch --batch --fuzz=5 -p1 -i " + q,
	}
}

// applyPatch tries applyCmds in sess; with undo, a failed attempt's partial
// changes are reverted (all of the checkout's changes: only for the first
// patch applied to it). It returns the command that worked, or "".
func applyPatch(ctx context.Context, sess sandbox.Session, patchFile string, undo bool) (string, error) {
	for _, c := range applyCmds(patchFile) {
		r, err := sess.Exec(ctx, c, 5*time.Minute)
		if err != nil {
			return "", err
		}
		if r.ExitCode == 0 {
			return c, nil
		}
		if undo {
			if _, err := sess.Exec(ctx, "git reset -q --hard && git clean -fdq", 5*time.Minute); err != nil {
				return "", err
			}
		}
	}
	return "", nil
}

var diffFileRe = regexp.MustCompile(`(?m)^diff --git a/(\S+) b/(\S+)$`)

// patchFiles lists the paths a unified git diff touches.
func patchFiles(patch string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range diffFileRe.FindAllStringSubmatch(patch, -1) {
		for _, p := range m[1:] {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// evaluate runs the SWE-bench verdict for patch on a fresh checkout made
// on the host from the trusted repository; everything after — applying the
// untrusted patch, resetting the test files, applying test_patch, the
// tests — runs inside one sandbox.
func (l *localBackend) evaluate(ctx context.Context, patch string) (Report, error) {
	e := l.e
	rep := Report{PatchBytes: len(patch), FailToPass: map[string]bool{}, PassToPass: map[string]bool{}}
	dir, err := sandbox.MkdirTemp(e.sh.Workspace(), "eval-")
	if err != nil {
		return rep, err
	}
	app, in := filepath.Join(dir, "app"), filepath.Join(dir, "in")
	if err := checkout(ctx, l.src, app, e.inst.BaseCommit); err != nil {
		return rep, err
	}
	if err := os.Mkdir(in, 0o755); err != nil {
		return rep, err
	}
	for name, body := range map[string]string{"model.patch": patch, "test.patch": e.inst.TestPatch} {
		if err := os.WriteFile(filepath.Join(in, name), []byte(body), 0o644); err != nil {
			return rep, err
		}
	}
	// No shared cache: the tests run the patched code, which must not carry
	// the test patch into a cache later episodes read.
	sess, err := l.runner.Start(ctx, sandbox.Spec{Workdir: app,
		Mounts: []sandbox.Mount{{Host: in, Target: "/in"}}, Limits: e.opts.Limits, Network: e.opts.Network})
	if err != nil {
		return rep, fmt.Errorf("start test sandbox: %w", err)
	}
	rep, err = l.runTests(ctx, sess, rep, app, patch)
	if cerr := sess.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("test sandbox not contained: %w", cerr)
	}
	return rep, err
}

// runTests applies the patches and runs the instance's tests in sess.
func (l *localBackend) runTests(ctx context.Context, sess sandbox.Session, rep Report, app, patch string) (Report, error) {
	e := l.e
	modelPatched := strings.TrimSpace(patch) != ""
	// Root entries the test tooling could import instead of its own
	// modules: the checkout's and the test patch's are the instance's,
	// anything else the patch's (or its code's, once the tests run).
	allowed := rootEntries(app)
	var afterModel map[string]bool
	if modelPatched {
		method, err := applyPatch(ctx, sess, "/in/model.patch", true)
		if err != nil {
			return rep, err
		}
		if method == "" {
			e.sh.SetMetric(metricPatchApplied, 0)
			return rep, nil // an unappliable patch resolves nothing
		}
		rep.PatchApplied, rep.ApplyMethod = true, method
	}
	e.sh.SetMetric(metricPatchApplied, map[bool]float64{false: 0, true: 1}[rep.PatchApplied])
	afterModel = rootEntries(app)
	if strings.TrimSpace(e.inst.TestPatch) != "" {
		// Test files are the instance's: undo the model's edits to them.
		base := sandbox.ShellQuote(e.inst.BaseCommit)
		for _, f := range patchFiles(e.inst.TestPatch) {
			q := sandbox.ShellQuote(f)
			r, err := sess.Exec(ctx, "if git cat-file -e "+base+":"+q+" 2>/dev/null; then git checkout -q "+base+" -- "+q+"; else rm -rf -- "+q+"; fi", time.Minute)
			if err != nil {
				return rep, err
			}
			if r.ExitCode != 0 && !modelPatched {
				return rep, fmt.Errorf("reset test file %s: %s", f, r.Output)
			}
		}
		method, err := applyPatch(ctx, sess, "/in/test.patch", false)
		if err != nil {
			return rep, err
		}
		if method == "" {
			if modelPatched {
				e.sh.SetMetric(metricTestPatchConflict, 1)
				return rep, nil // the model's patch broke what the tests need
			}
			return rep, errors.New("test_patch does not apply to base_commit")
		}
	}
	for name := range rootEntries(app) {
		if !afterModel[name] {
			allowed[name] = true // added by test_patch
		}
	}
	shadowed := func() string {
		byMod := map[string]string{}
		var mods []string
		for name := range rootEntries(app) {
			if mod := moduleOf(app, name); !allowed[name] && mod != "" && byMod[mod] == "" {
				byMod[mod] = name
				mods = append(mods, mod)
			}
		}
		if len(mods) == 0 {
			return ""
		}
		sort.Strings(mods)
		if hit := toolingModules(ctx, sess, mods); len(hit) > 0 {
			return fmt.Sprintf("the patched repository has %s at its root, where `python3 -m pytest|unittest` would import it instead of the module %s that the test tooling can import; local mode refuses such patches (resolves nothing)", byMod[hit[0]], hit[0])
		}
		return ""
	}
	if note := shadowed(); note != "" {
		rep.Note = note
		e.sh.SetMetric(metricToolingShadowed, 1)
		return rep, nil
	}
	hasPytest := false
	if r, err := sess.Exec(ctx, "python3 -I -c 'import pytest' 2>/dev/null", 30*time.Second); err == nil && r.ExitCode == 0 {
		hasPytest = true
	}
	begin := time.Now()
	var refused string
	run := func(ids []string, into map[string]bool) error {
		for _, id := range ids {
			tc := TestCommand(&e.inst, app, id, hasPytest)
			// A test run executes the patched code, which can write such a
			// module for the next run: checked before each.
			if refused == "" {
				refused = shadowed()
			}
			if refused != "" {
				into[id] = false
				continue
			}
			r, err := sess.Exec(ctx, tc.Cmd, e.opts.TestTimeout)
			if err != nil {
				return fmt.Errorf("run test %s: %w", id, err)
			}
			into[id] = r.ExitCode == 0 && !r.TimedOut && (tc.MustContain == "" || strings.Contains(r.Output, tc.MustContain))
		}
		return nil
	}
	if err := run(e.inst.FailToPass, rep.FailToPass); err != nil {
		return rep, err
	}
	if err := run(e.inst.PassToPass, rep.PassToPass); err != nil {
		return rep, err
	}
	e.sh.SetMetric(metricTestSeconds, time.Since(begin).Seconds())
	if refused != "" {
		rep.Note = refused
		e.sh.SetMetric(metricToolingShadowed, 1)
	}
	rep.Resolved = refused == ""
	f2p, p2p := 0, 0
	for _, ok := range rep.FailToPass {
		if ok {
			f2p++
		} else {
			rep.Resolved = false
		}
	}
	for _, ok := range rep.PassToPass {
		if ok {
			p2p++
		} else {
			rep.Resolved = false
		}
	}
	e.sh.SetMetric(metricF2PPassed, float64(f2p))
	e.sh.SetMetric(metricF2PTotal, float64(len(rep.FailToPass)))
	e.sh.SetMetric(metricP2PPassed, float64(p2p))
	e.sh.SetMetric(metricP2PTotal, float64(len(rep.PassToPass)))
	e.sh.SetMetric(metricResolved, map[bool]float64{false: 0, true: 1}[rep.Resolved])
	return rep, nil
}

// TestCmd is how one test id is run.
type TestCmd struct {
	Cmd string
	// MustContain, if set, must appear in the output for a pass (go test
	// exits 0 when -run matches nothing).
	MustContain string
}

// TestCommand returns the command for test id in the checkout at root:
// the instance's test_cmd with {test} replaced by the quoted id; for a Go
// module, id "TestX", "TestX/sub" or "pkg:TestX" becomes
// `go test -count=1 -v -run '^TestX$' ./...` (or pkg), passing only if
// "--- PASS: TestX" is printed; otherwise Python: `python3 -m pytest` for
// ids with "::" or ".py" when pytest is available, else
// `python3 -m unittest -v` with "a/b.py::C::m" rewritten to "a.b.C.m".
func TestCommand(inst *Instance, root, id string, hasPytest bool) TestCmd {
	q := sandbox.ShellQuote(id)
	if inst.TestCmd != "" {
		if strings.Contains(inst.TestCmd, "{test}") {
			return TestCmd{Cmd: strings.ReplaceAll(inst.TestCmd, "{test}", q)}
		}
		return TestCmd{Cmd: inst.TestCmd + " " + q}
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
		pkg, name := "./...", id
		if p, n, ok := strings.Cut(id, ":"); ok {
			pkg, name = p, n
		}
		parts := strings.Split(name, "/")
		pat := make([]string, len(parts))
		for i, p := range parts {
			pat[i] = "^" + regexp.QuoteMeta(p) + "$"
		}
		return TestCmd{
			Cmd:         fmt.Sprintf("go test -count=1 -v -run %s %s 2>&1", sandbox.ShellQuote(strings.Join(pat, "/")), sandbox.ShellQuote(pkg)),
			MustContain: "--- PASS: " + name + " ",
		}
	}
	pytestStyle := strings.Contains(id, "::") || strings.Contains(id, ".py")
	if pytestStyle && hasPytest {
		return TestCmd{Cmd: "python3 -m pytest -q -p no:cacheprovider " + q + " 2>&1"}
	}
	if pytestStyle {
		mod := strings.ReplaceAll(id, "::", ".")
		mod = strings.Replace(mod, ".py.", ".", 1)
		mod = strings.TrimSuffix(mod, ".py")
		mod = strings.ReplaceAll(mod, "/", ".")
		q = sandbox.ShellQuote(mod)
	}
	return TestCmd{Cmd: "python3 -m unittest -v " + q + " 2>&1"}
}

// OracleReply submits the instance's gold patch.
func OracleReply(inst *Instance) string {
	p := inst.Patch
	if !strings.HasSuffix(p, "\n") {
		p += "\n"
	}
	return "```diff\n" + p + "```\n<submit/>"
}

// Report is the last evaluation's verdict.
func (e *Env) Report() Report { return e.report }

// Metrics implements agent.MetricsReporter.
func (e *Env) Metrics() map[string]float64 { return e.sh.Metrics() }

// Close ends the episode early (if running) and removes the workspace
// unless KeepWorkspace; see shelltask.Shell.Close.
func (e *Env) Close() error { return errors.Join(e.sh.Close(), e.back.close()) }

// toolingModules reports which of mods the test tooling could import as
// its own: a standard-library module, or one found on the sandbox's
// python3 path without the working directory (python3 -I), where pytest,
// pluggy and their dependencies are. The working directory comes first on
// sys.path under `python3 -m pytest|unittest`, so a module of one of these
// names at the repository's root is imported instead. When python3 cannot
// answer, every name counts.
func toolingModules(ctx context.Context, sess sandbox.Session, mods []string) []string {
	cmd := `python3 -I -c 'import sys, importlib.util
for n in sys.argv[1:]:
    if n in getattr(sys, "stdlib_module_names", ()) or importlib.util.find_spec(n) is not None:
        print(n)'`
	for _, m := range mods {
		cmd += " " + sandbox.ShellQuote(m)
	}
	r, err := sess.Exec(ctx, cmd+" 2>/dev/null", time.Minute)
	if err != nil || r.ExitCode != 0 || r.Truncated {
		return mods
	}
	var out []string
	for _, m := range mods {
		if slices.Contains(toolNames, m) || slices.Contains(strings.Fields(r.Output), m) {
			out = append(out, m)
		}
	}
	return out
}

// toolNames are the test tools' own modules, refused at the root whether
// or not the sandbox has them installed (pytest.py there would make the
// probe for pytest succeed).
var toolNames = []string{"unittest", "pytest", "_pytest", "pluggy"}

// rootEntries are the names in dir (none when it cannot be read).
func rootEntries(dir string) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(dir)
	for _, en := range ents {
		out[en.Name()] = true
	}
	return out
}

// moduleOf is the module an entry of dir would be imported as: NAME.py,
// NAME.pyc and extension modules (NAME.*.so, NAME.so) are NAME; a
// directory is NAME when it holds an __init__ file (a directory without
// one is a namespace portion, which a module found later on sys.path
// beats); "" for anything else.
func moduleOf(dir, name string) string {
	fi, err := os.Lstat(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	if fi.IsDir() {
		inits, _ := filepath.Glob(filepath.Join(dir, name, "__init__*"))
		if len(inits) == 0 {
			return ""
		}
		return name
	}
	base, ext, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	switch {
	case ext == "py" || ext == "pyc" || ext == "pyw" || ext == "so" || ext == "pyd":
		return base
	case strings.HasSuffix(ext, ".so") || strings.HasSuffix(ext, ".pyd"):
		return base
	}
	return ""
}
