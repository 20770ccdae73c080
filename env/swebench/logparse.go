package swebench

import (
	"regexp"
	"strings"
	"unicode"
)

// Test statuses of the harness's log parsers (TestStatus in
// swebench/harness/constants/__init__.py).
const (
	StatusFailed  = "FAILED"
	StatusPassed  = "PASSED"
	StatusSkipped = "SKIPPED"
	StatusError   = "ERROR"
	StatusXFail   = "XFAIL"
)

var statuses = []string{StatusFailed, StatusPassed, StatusSkipped, StatusError, StatusXFail}

// A LogParser maps a test log to each test's status, as one of the
// harness's parsers (swebench/harness/log_parsers/python.py) does.
type LogParser func(log string) map[string]string

// parsers are the harness's Python log parsers by name; its per-repository
// aliases (parse_log_flask = parse_log_pytest, …) are resolved by
// harness_specs.json.
var parsers = map[string]LogParser{
	"parse_log_pytest":         parsePytest,
	"parse_log_pytest_options": parsePytestOptions,
	"parse_log_pytest_v2":      parsePytestV2,
	"parse_log_django":         parseDjango,
	"parse_log_sympy":          parseSympy,
	"parse_log_seaborn":        parseSeaborn,
	"parse_log_matplotlib":     parseMatplotlib,
}

// RepoParser is the harness's log parser for repo, nil for a repository
// it does not know.
func RepoParser(repo string) LogParser { return parsers[ParserName(repo)] }

// pySpace is Python's str.isspace for the characters str.split() and
// str.strip() treat as white space: Go's unicode.IsSpace plus the
// separators U+001C–U+001F.
func pySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pySplit is Python's str.split() with no arguments.
func pySplit(s string) []string { return strings.FieldsFunc(s, pySpace) }

// pyStrip is Python's str.strip() with no arguments.
func pyStrip(s string) string { return strings.TrimFunc(s, pySpace) }

func startsWithStatus(line string) bool {
	for _, s := range statuses {
		if strings.HasPrefix(line, s) {
			return true
		}
	}
	return false
}

func endsWithStatus(line string) bool {
	for _, s := range statuses {
		if strings.HasSuffix(line, s) {
			return true
		}
	}
	return false
}

// parsePytest reads pytest's -rA summary: a line starting with a status,
// the test id its second word (so an id holding a space is cut there), a
// FAILED line's " - " message separator removed first.
func parsePytest(log string) map[string]string { return parsePytestIDs(log, nil) }

var optionRe = regexp.MustCompile(`(.*?)\[(.*)\]`)

// parsePytestOptions is parsePytest with a parametrized id's option that
// is an absolute path cut to its last element ("/a/b/c" → "/c").
func parsePytestOptions(log string) map[string]string {
	return parsePytestIDs(log, func(id string) string {
		g := optionRe.FindStringSubmatch(id)
		if g == nil {
			return id
		}
		main, option := g[1], g[2]
		if strings.HasPrefix(option, "/") && !strings.HasPrefix(option, "//") && !strings.Contains(option, "*") {
			option = "/" + option[strings.LastIndexByte(option, '/')+1:]
		}
		return main + "[" + option + "]"
	})
}

// parsePytestIDs is parsePytest's loop, each test id passed through
// rename when it is not nil.
func parsePytestIDs(log string, rename func(string) string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if !startsWithStatus(line) {
			continue
		}
		if strings.HasPrefix(line, StatusFailed) {
			line = strings.ReplaceAll(line, " - ", " ")
		}
		f := pySplit(line)
		if len(f) <= 1 {
			continue
		}
		id := f[1]
		if rename != nil {
			id = rename(id)
		}
		m[id] = f[0]
	}
	return m
}

var ansiColorRe = regexp.MustCompile(`\[(\d+)m`)

// parsePytestV2 is parsePytest on lines stripped of color codes and
// control characters, also reading the verbose "ID STATUS" lines of older
// pytest versions.
func parsePytestV2(log string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		line = ansiColorRe.ReplaceAllString(line, "")
		line = strings.Map(func(r rune) rune {
			if r >= 1 && r < 32 {
				return -1
			}
			return r
		}, line)
		switch {
		case startsWithStatus(line):
			if strings.HasPrefix(line, StatusFailed) {
				line = strings.ReplaceAll(line, " - ", " ")
			}
			if f := pySplit(line); len(f) >= 2 {
				m[f[1]] = f[0]
			}
		case endsWithStatus(line):
			if f := pySplit(line); len(f) >= 2 {
				m[f[0]] = f[1]
			}
		}
	}
	return m
}

// cutBefore is Python's s.split(sep)[0].
func cutBefore(s, sep string) string {
	before, _, _ := strings.Cut(s, sep)
	return before
}

var djangoPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sTesting against Django installed in ((?s:.*?)) silenced\)\.\nok$`),
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sInternal Server Error: /(.*)/\nok$`),
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$`),
}

// parseDjango reads Django's runner at --verbosity 2: "ID ... ok|OK|
// skipped|FAIL|ERROR" lines, "FAIL: ID"/"ERROR: ID" headers, a lone "ok"
// after output that split a test's line, and the three known interrupted
// lines.
func parseDjango(log string) map[string]string {
	m := map[string]string{}
	prev, havePrev := "", false
	for _, line := range strings.Split(log, "\n") {
		line = pyStrip(line)
		if strings.Contains(line, "--version is equivalent to version") {
			m["--version is equivalent to version"] = StatusPassed
		}
		if strings.Contains(line, " ... ") {
			prev, havePrev = cutBefore(line, " ... "), true
		}
		for _, suffix := range []string{" ... ok", " ... OK", " ...  OK"} {
			if strings.HasSuffix(line, suffix) {
				if strings.HasPrefix(pyStrip(line), "Applying sites.0002_alter_domain_unique...test_no_migrations") {
					if _, after, ok := strings.Cut(line, "..."); ok {
						line = pyStrip(after)
					}
				}
				test := line
				if i := strings.LastIndex(line, suffix); i >= 0 {
					test = line[:i]
				}
				m[test] = StatusPassed
				break
			}
		}
		if strings.Contains(line, " ... skipped") {
			m[cutBefore(line, " ... skipped")] = StatusSkipped
		}
		if strings.HasSuffix(line, " ... FAIL") {
			m[cutBefore(line, " ... FAIL")] = StatusFailed
		}
		if strings.HasPrefix(line, "FAIL:") {
			if f := pySplit(line); len(f) > 1 {
				m[pyStrip(f[1])] = StatusFailed
			}
		}
		if strings.HasSuffix(line, " ... ERROR") {
			m[cutBefore(line, " ... ERROR")] = StatusError
		}
		if strings.HasPrefix(line, "ERROR:") {
			if f := pySplit(line); len(f) > 1 {
				m[pyStrip(f[1])] = StatusError
			}
		}
		if strings.HasPrefix(strings.TrimLeftFunc(line, pySpace), "ok") && havePrev {
			m[prev] = StatusPassed
		}
	}
	for _, re := range djangoPatterns {
		for _, g := range re.FindAllStringSubmatch(log, -1) {
			m[g[1]] = StatusPassed
		}
	}
	return m
}

var sympyFailRe = regexp.MustCompile(`(_*) (.*)\.py:(.*) (_*)`)

// parseSympy reads SymPy's bin/test: "____ path.py:test_name ____" failure
// headers, then "test_name ok|F|E" lines of --verbose.
func parseSympy(log string) map[string]string {
	m := map[string]string{}
	for _, g := range sympyFailRe.FindAllStringSubmatch(log, -1) {
		m[g[2]+".py:"+g[3]] = StatusFailed
	}
	for _, line := range strings.Split(log, "\n") {
		line = pyStrip(line)
		if !strings.HasPrefix(line, "test_") {
			continue
		}
		test := pySplit(line)[0]
		if strings.HasSuffix(line, " E") {
			m[test] = StatusError
		}
		if strings.HasSuffix(line, " F") {
			m[test] = StatusFailed
		}
		if strings.HasSuffix(line, " ok") {
			m[test] = StatusPassed
		}
	}
	return m
}

// parseSeaborn reads FAILED lines, "ID PASSED …" lines and PASSED lines.
func parseSeaborn(log string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(line, StatusFailed):
			if f := pySplit(line); len(f) > 1 {
				m[f[1]] = StatusFailed
			}
		case strings.Contains(line, " "+StatusPassed+" "):
			if f := pySplit(line); len(f) > 1 && f[1] == StatusPassed {
				m[f[0]] = StatusPassed
			}
		case strings.HasPrefix(line, StatusPassed):
			if f := pySplit(line); len(f) > 1 {
				m[f[1]] = StatusPassed
			}
		}
	}
	return m
}

// parseMatplotlib is parsePytest with MouseButton.LEFT/RIGHT written 1/3.
func parseMatplotlib(log string) map[string]string {
	r := strings.NewReplacer("MouseButton.LEFT", "1", "MouseButton.RIGHT", "3")
	return parsePytest(r.Replace(log))
}

// LogsEval is the harness's get_logs_eval (swebench/harness/grading.py) on
// a test log, read as the harness reads its log file (\r\n and \r as
// line ends): no statuses and found false when the log holds one of the
// harness's failure markers or lacks the start/end markers; otherwise the
// repository's parser on the text between the markers, or on the whole log
// when that finds nothing.
func LogsEval(repo, log string) (status map[string]string, found bool) {
	parse := RepoParser(repo)
	if parse == nil {
		return map[string]string{}, false
	}
	// The harness reads the log back in text mode: universal newlines.
	log = strings.ReplaceAll(log, "\r\n", "\n")
	log = strings.ReplaceAll(log, "\r", "\n")
	for _, bad := range []string{applyPatchFail, resetFailed, testsError, testsTimeout} {
		if strings.Contains(log, bad) {
			return map[string]string{}, false
		}
	}
	if !strings.Contains(log, StartTestOutput) || !strings.Contains(log, EndTestOutput) {
		return map[string]string{}, false
	}
	// content.split(START)[1].split(END)[0]: up to a second start marker too.
	_, after, _ := strings.Cut(log, StartTestOutput)
	after, _, _ = strings.Cut(after, StartTestOutput)
	between, _, _ := strings.Cut(after, EndTestOutput)
	status = parse(between)
	if len(status) == 0 {
		status = parse(log)
	}
	return status, true
}
