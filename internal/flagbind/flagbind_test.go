package flagbind

import (
	"flag"
	"io"
	"strings"
	"testing"
)

type kind string

type settings struct {
	Name    kind    `yaml:"name" help:"a name"`
	Rate    float64 `yaml:"learning_rate" help:"the rate"`
	Count   int     `yaml:"count" help:"how many"`
	On      bool    `yaml:"mask_overlong" help:"mask them"`
	Off     bool    `yaml:"verbose" help:"say more"`
	Hidden  int     `yaml:"hidden"`
	private int
}

func TestBind(t *testing.T) {
	s := settings{Name: "a", Rate: 0.5, Count: 2, On: true}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	Bind(fs, &s)
	if fs.Lookup("hidden") != nil || fs.Lookup("mask-overlong") != nil {
		t.Fatal("a field without help, or a true bool under its own name, was bound")
	}
	if err := fs.Parse([]string{"--name", "b", "--learning-rate", "0.25", "--count=3", "--no-mask-overlong", "--verbose"}); err != nil {
		t.Fatal(err)
	}
	if s != (settings{Name: "b", Rate: 0.25, Count: 3, On: false, Off: true}) {
		t.Fatalf("bound %+v", s)
	}
	if u := fs.Lookup("name").Usage; !strings.Contains(u, `default "a"`) {
		t.Errorf("usage %q does not give the default", u)
	}
	if err := fs.Parse([]string{"--count", "x"}); err == nil {
		t.Error("a bad int accepted")
	}
}

func TestBindPanicsOnUnsupportedKind(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a []int field was bound")
		}
	}()
	var s struct {
		L []int `yaml:"l" help:"list"`
	}
	Bind(flag.NewFlagSet("x", flag.ContinueOnError), &s)
}
