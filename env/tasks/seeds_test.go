package tasks

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
)

type splitSuite struct{ bad string }

func (splitSuite) Has(string) bool { return true }

func (s splitSuite) Env(id string) (agent.Environment, error) {
	if id == s.bad {
		return nil, errors.New("no such task")
	}
	return nil, nil
}

func (splitSuite) Split(name string) (int64, int64, error) {
	if name != "test" {
		return 0, 0, errors.New("want test")
	}
	return 100, 103, nil
}

func TestSeedIDsAndSuiteTasks(t *testing.T) {
	ids, err := SeedIDs(splitSuite{}, "test", 3)
	if err != nil || !reflect.DeepEqual(ids, []string{"100", "101", "102"}) {
		t.Fatalf("ids %v, %v", ids, err)
	}
	for _, c := range []struct {
		split string
		n     int
		want  string
	}{{"test", 4, "split test has 3 seeds"}, {"train", 1, "want test"}, {"test", 0, "want ≥ 1"}} {
		if _, err := SeedIDs(splitSuite{}, c.split, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %d: %v, want %q", c.split, c.n, err, c.want)
		}
	}
	ts := SuiteTasks(splitSuite{bad: "101"}, ids)
	if ts[1].Name != "101" {
		t.Fatalf("names %v", ts)
	}
	if _, err := ts[1].New(false).Reset(context.Background()); err == nil || !strings.Contains(err.Error(), "no such task") {
		t.Fatalf("a task the suite cannot make: %v", err)
	}
}
