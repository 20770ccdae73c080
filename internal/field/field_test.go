package field

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestPaths(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Key("", "context"), "context"},
		{Key("agent", "context"), "agent.context"},
		{Key("agent", ""), "agent"},
		{Index(Key("", "segments"), 2), "segments[2]"},
		{Key(Index("segments", 2), "loss_mask"), "segments[2].loss_mask"},
		{MapKey("metrics", `a"b`), `metrics["a\"b"]`},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestUnder(t *testing.T) {
	joined := errors.Join(Errorf("context", "0 must be positive"), Errorf("top_p", "2 must be in [0, 1]"))
	err := Under("agent", joined)
	if err.Error() != "agent.context: 0 must be positive\nagent.top_p: 2 must be in [0, 1]" {
		t.Fatalf("%q", err)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Path != "agent.context" {
		t.Fatalf("errors.As: %+v", fe)
	}
	if err := Under("rl", fmt.Errorf("wrapped: %w", Errorf("gamma", "2 must be in [0, 1]"))); err.Error() != "rl.gamma: 2 must be in [0, 1]" {
		t.Fatalf("%q", err)
	}
	plain := errors.New("files 0 must be positive")
	if err := Under("suite", plain); err.Error() != "suite: files 0 must be positive" || !errors.Is(err, plain) {
		t.Fatalf("%q", err)
	}
	if Under("x", nil) != nil {
		t.Fatal("nil placed")
	}
	if err := (&Error{Msg: "empty body"}); err.Error() != "empty body" {
		t.Fatalf("%q", err)
	}
}

func TestCheckInts(t *testing.T) {
	err := CheckInts(Int{"a", 0, 1, 10}, Int{"b", -1, 0, 10}, Int{"c", 11, 0, 10}, Int{"d", 1, 2, 10}, Int{"e", 5, 0, 10})
	want := "a: 0 must be positive\nb: -1 must not be negative\nc: 11 is above the limit 10\nd: 1 must be at least 2"
	if err == nil || err.Error() != want {
		t.Fatalf("%v\nwant\n%s", err, want)
	}
	for _, c := range []struct {
		f    Float
		want string
	}{
		{Float{"lr", 11, 0, 10}, "lr: 11 is above the limit 10"},
		{Float{"lr", -1, 0, 10}, "lr: -1 must not be negative"},
		{Float{"p", 0.1, 0.5, 1}, "p: 0.1 must be in [0.5, 1]"},
		{Float{"p", math.NaN(), 0, 1}, "p: NaN is not a finite number"},
	} {
		if err := c.f.Check(); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v, want %s", c.f, err, c.want)
		}
	}
	if (Float{"lr", 1, 0, 10}).Check() != nil {
		t.Error("float in bounds")
	}
	if CheckInts(Int{"e", 5, 0, 10}) != nil {
		t.Fatal("in bounds")
	}
}
