package agent

import (
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
			return New(testConfig(), byteTok{}, Template{System: 1, User: 1, Assistant: 2, Observation: 3, Summary: 4, EndOfTurn: 5}, s)
		}, "agent config: template: special id 1 used twice"},
		{"config", func() (*Agent, error) { return New(bad, byteTok{}, testTmpl, s) }, "agent config: "},
		{"missing part", func() (*Agent, error) { return NewWithFormat(testConfig(), nil, testTmpl.Format(), s) }, "agent config: tokenizer, format and sampler are required"},
		{"no stop", func() (*Agent, error) {
			return NewWithFormat(testConfig(), byteTok{}, noStopFormat{testTmpl.Format()}, s)
		}, "agent config: the format has no stop token"},
		{"resume", func() (*Agent, error) {
			return NewWithFormat(testConfig(), byteTok{}, dropSummaryFormat{testTmpl.Format()}, s)
		}, "agent config: the format's Resume does not place the summary once"},
		{"budget", func() (*Agent, error) { return New(small, byteTok{}, testTmpl, s) }, "agent config: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := tc.new()
			if a != nil || !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err %v; want ErrConfig with text %q…", err, tc.want)
			}
		})
	}
	if _, err := New(testConfig(), byteTok{}, testTmpl, s); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
}
