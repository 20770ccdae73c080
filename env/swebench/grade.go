package swebench

// Resolution statuses of the harness (ResolvedStatus).
const (
	ResolvedNo      = "RESOLVED_NO"
	ResolvedPartial = "RESOLVED_PARTIAL"
	ResolvedFull    = "RESOLVED_FULL"
)

// Outcome splits a list of tests into those that succeeded and those
// that failed; a test that did neither (skipped) is in neither list.
type Outcome struct {
	Success []string `json:"success"`
	Failure []string `json:"failure"`
}

// TestsReport is the harness's tests_status report for FAIL_TO_PASS and
// PASS_TO_PASS.
type TestsReport struct {
	FailToPass Outcome `json:"FAIL_TO_PASS"`
	PassToPass Outcome `json:"PASS_TO_PASS"`
}

// testPassed and testFailed are the harness's test_passed and test_failed
// (swebench/harness/grading.py): PASSED and XFAIL pass; FAILED, ERROR and
// a test missing from the log fail; any other status (SKIPPED) does
// neither, and the test is left out of the rates.
func testPassed(id string, status map[string]string) bool {
	s, ok := status[id]
	return ok && (s == StatusPassed || s == StatusXFail)
}

func testFailed(id string, status map[string]string) bool {
	s, ok := status[id]
	return !ok || s == StatusFailed || s == StatusError
}

// GradeTests is the harness's get_eval_tests_report for its Python
// repositories (EvalType PASS_AND_FAIL): each FAIL_TO_PASS and PASS_TO_PASS
// test as success, failure or neither by its parsed status.
func GradeTests(status map[string]string, failToPass, passToPass []string) TestsReport {
	grade := func(ids []string) Outcome {
		o := Outcome{Success: []string{}, Failure: []string{}}
		for _, id := range ids {
			switch {
			case testPassed(id, status):
				o.Success = append(o.Success, id)
			case testFailed(id, status):
				o.Failure = append(o.Failure, id)
			}
		}
		return o
	}
	return TestsReport{FailToPass: grade(failToPass), PassToPass: grade(passToPass)}
}

// rate is successes over graded tests, 1 when none was graded (the
// harness's compute_fail_to_pass / compute_pass_to_pass).
func (o Outcome) rate() float64 {
	n := len(o.Success) + len(o.Failure)
	if n == 0 {
		return 1
	}
	return float64(len(o.Success)) / float64(n)
}

// Resolution is the harness's get_resolution_status: RESOLVED_FULL when
// every graded FAIL_TO_PASS and PASS_TO_PASS test succeeded, PARTIAL when
// some but not all FAIL_TO_PASS did and every PASS_TO_PASS did, else NO.
func (r TestsReport) Resolution() string {
	f2p, p2p := r.FailToPass.rate(), r.PassToPass.rate()
	switch {
	case f2p == 1 && p2p == 1:
		return ResolvedFull
	case f2p > 0 && f2p < 1 && p2p == 1:
		return ResolvedPartial
	}
	return ResolvedNo
}

// GradeLog grades one test log of inst as the harness's get_eval_report
// does once the model's patch applied: LogsEval, then GradeTests. found is
// false (and the instance not resolved) when the log has no test output
// the harness would read.
func GradeLog(inst *Instance, log string) (status map[string]string, report TestsReport, found bool) {
	status, found = LogsEval(inst.Repo, log)
	if !found {
		return status, TestsReport{}, false
	}
	return status, GradeTests(status, inst.FailToPass, inst.PassToPass), true
}
