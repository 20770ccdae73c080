package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// cmdLine is how every command and subcommand reads its command line: a
// FlagSet whose usage is the synopsis, an optional paragraph, the flags
// and examples. parse takes the flags wherever they stand among the
// positional arguments; -h prints the usage on stdout (exit 0); a bad
// flag or a stray argument is a usageError (exit 2, the usage on stderr).
type cmdLine struct {
	*flag.FlagSet
	// synopsis is one line per form, each after "compactrl ".
	synopsis []string
	about    string
	examples []string
	// maxArgs is how many positional arguments the command takes (-1: any).
	maxArgs int
}

// newCmdLine starts a command's FlagSet; name is its words after
// "compactrl" ("eval checkpoint").
func newCmdLine(name string, synopsis ...string) *cmdLine {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmdLine{FlagSet: fs, synopsis: synopsis}
}

// usage writes the synopsis, the paragraph, the flags and the examples.
func (c *cmdLine) usage(w io.Writer) {
	for i, s := range c.synopsis {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintf(w, "%scompactrl %s\n", lead, s)
	}
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", c.about)
	}
	hasFlags := false
	c.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		c.SetOutput(w)
		c.PrintDefaults()
		c.SetOutput(io.Discard)
	}
	fmt.Fprintln(w, "\nExamples:")
	for _, x := range c.examples {
		fmt.Fprintf(w, "  %s\n", x)
	}
}

func (c *cmdLine) usageText() string {
	var b strings.Builder
	c.usage(&b)
	return b.String()
}

// usageError is a command line that cannot run: main prints the message,
// then the usage, on stderr and exits 2.
type usageError struct {
	msg, usage string
}

func (u *usageError) Error() string { return u.msg }

// ExitCode is the status of a command-line error, as the flag package's.
func (u *usageError) ExitCode() int { return 2 }

// usageErr is a usageError of c.
func (c *cmdLine) usageErr(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...), usage: c.usageText()}
}

// parse reads args: the flags, wherever they stand, and the positional
// arguments in order (everything after "--" is positional). With -h it
// prints the usage on stdout and returns flag.ErrHelp.
func (c *cmdLine) parse(e env, args []string) ([]string, error) {
	var pos []string
	for {
		err := c.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.usage(e.stdout)
			return nil, flag.ErrHelp
		}
		if err != nil {
			return nil, c.usageErr("%v", err)
		}
		rest := c.Args()
		if len(rest) == 0 {
			break
		}
		if used := args[:len(args)-len(rest)]; len(used) > 0 && used[len(used)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if c.maxArgs >= 0 && len(pos) > c.maxArgs {
		return nil, c.usageErr("unexpected arguments %q", pos[c.maxArgs:])
	}
	return pos, nil
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "-help" }

// subcommand is one word of a command that has several (model init).
type subcommand struct {
	name string
	run  func(ctx context.Context, e env, args []string) error
}

// dispatch runs the subcommand args[0] names. Arguments that name none go
// to dflt when the command has a default form (export, eval); otherwise
// they are a usage error, and -h prints parent's usage.
func dispatch(ctx context.Context, e env, parent *cmdLine, subs []subcommand, dflt func(context.Context, env, []string) error, args []string) error {
	if len(args) > 0 {
		for _, s := range subs {
			if s.name == args[0] {
				return s.run(ctx, e, args[1:])
			}
		}
	}
	if dflt != nil {
		return dflt(ctx, e, args)
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	switch {
	case len(args) == 0:
		return parent.usageErr("need a subcommand: %s", strings.Join(names, " or "))
	case isHelp(args[0]):
		parent.usage(e.stdout)
		return flag.ErrHelp
	}
	return parent.usageErr("unknown subcommand %q (want %s)", args[0], strings.Join(names, " or "))
}
