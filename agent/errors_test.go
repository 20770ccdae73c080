package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// noStopFormat is a Format with no stop token.
type noStopFormat struct{ Format }

func (noStopFormat) Stop() []int { return nil }

// dropSummaryFormat is a Format whose Resume leaves the summary out.
type dropSummaryFormat struct{ Format }

func (f dropSummaryFormat) Resume(text, _ []int) []int { return f.Format.Resume(text, nil) }

// Every refusal of New and NewWithFormat is ErrConfig (serve answers it on
// the request's agent field), with the text it always had.
func TestConstructionErrorsAreErrConfig(t *testing.T) {
	s := &randSampler{}
	small := testConfig()
	small.Reserve = 8
	bad := testConfig()
	bad.KeepLast = -1
	for _, tc := range []struct {
		name string
		new  func() (*Agent, error)
		want string
	}{
		{"template", func() (*Agent, error) {
			return New(context.Background(), testConfig(), Local(byteTok{}), Template{System: 1, User: 1, Assistant: 2, Observation: 3, Summary: 4, EndOfTurn: 5}, s)
		}, "agent config: template: special id 1 used twice"},
		{"config", func() (*Agent, error) { return New(context.Background(), bad, Local(byteTok{}), testTmpl, s) }, "agent config: "},
		{"missing part", func() (*Agent, error) {
			return NewWithFormat(context.Background(), testConfig(), nil, testTmpl.Format(), s)
		}, "agent config: tokenizer, format and sampler are required"},
		{"no stop", func() (*Agent, error) {
			return NewWithFormat(context.Background(), testConfig(), Local(byteTok{}), noStopFormat{testTmpl.Format()}, s)
		}, "agent config: the format has no stop token"},
		{"resume", func() (*Agent, error) {
			return NewWithFormat(context.Background(), testConfig(), Local(byteTok{}), dropSummaryFormat{testTmpl.Format()}, s)
		}, "agent config: the format's Resume does not place the summary once"},
		{"budget", func() (*Agent, error) { return New(context.Background(), small, Local(byteTok{}), testTmpl, s) }, "agent config: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.new()
			if a != nil || !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err %v; want ErrConfig with text %q…", err, tc.want)
			}
		})
	}
	if _, err := New(context.Background(), testConfig(), Local(byteTok{}), testTmpl, s); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
}

// A tokenizer that fails while New encodes the fixed texts is not a
// configuration error: the error names the text and keeps the cause.
func TestConstructionTokenizerFailureIsNotErrConfig(t *testing.T) {
	for failAt, what := range map[int]string{1: "system prompt", 2: "summary instruction", 3: "resume text", 4: "omission marker"} {
		a, err := New(context.Background(), testConfig(), &flakyTok{failAt: failAt}, testTmpl, &randSampler{})
		if a != nil || err == nil || errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), what+": tokenize: tokenizer endpoint down") {
			t.Fatalf("failing call %d: err %v; want %q…, not ErrConfig", failAt, err, what)
		}
	}
}
