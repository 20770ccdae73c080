// Command compactrl trains long-horizon LLM agents by reinforcement learning
// with context compaction (CompactionRL). Each subcommand lives in its own
// file of this package; this file only dispatches.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/compactrl/compactrl/kernel"
)

// env is what a subcommand may touch of the process: its streams. Passing it
// explicitly keeps subcommands testable in-process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// lookupEnv reads an environment variable (nil: os.Getenv); tests set
	// it instead of the process's environment.
	lookupEnv func(string) string
}

func (e env) getenv(name string) string {
	if e.lookupEnv != nil {
		return e.lookupEnv(name)
	}
	return os.Getenv(name)
}

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"advantages": {"fill episode JSONL (stdin) with advantages and returns (stdout)", runAdvantages},
		"demo":       {"CompactionRL from the shipped base policy, evaluated before and after (--from-scratch: pretrain first)", runDemo},
		"pretrain":   {"make a base policy: copy, recall and SFT warm start on the vault expert (--out DIR)", runPretrain},
		"eval":       {"pass@1 on Harbor task dirs or SWE-bench JSONL (--engine URL | --policy oracle), or --checkpoint DIR", runEval},
		"export":     {"export gguf (checkpoint → llama.cpp) or --format slime|jsonl (episodes → trainer records)", runExport},
		"train":      {"train with CompactionRL from a YAML config (--config FILE.yaml, --resume DIR)", runTrain},
		"experiment": {"run the paper's arms (base, no compaction, CompactionRL, ablations) over seeds; Markdown table + report", runExperiment},
		"report":     {"render a run directory's metrics as an HTML report", runReport},
		"serve":      {"the agent loop as an HTTP rollout service for slime (POST /v1/rollouts; docs/scale.md)", runServe},
		"rollout":    {"play episodes with a policy, write episode JSONL and statistics", runRollout},
		"show":       {"print a readable transcript of one episode (compactions marked)", runShow},
		"model":      {"create a checkpoint (init) or print its logits (logits)", runModel},
		"bench":      {"bench model: training/decode throughput vs PyTorch and llama.cpp, GEMM vs FMA peak", runBench},
		"help":       {"list the commands, or print one command's flags and examples", runHelp},
		"tokenize":   {"print the token ids of stdin, or of --chat messages rendered with the model's chat template (--tokenizer FILE|DIR)", runTokenize},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: compactrl COMMAND [flags]\n\ncommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\n`compactrl COMMAND -h` (or `compactrl help COMMAND`) describes a command's flags.\n\nExamples:\n  compactrl demo\n  compactrl help eval")
}

// runHelp is `compactrl help [COMMAND [SUBCOMMAND]]`: the command list,
// or one command's usage.
func runHelp(ctx context.Context, e env, args []string) error {
	c := newCmdLine("help", "help [COMMAND [SUBCOMMAND]]")
	c.about = "Lists the commands, or prints a command's flags and examples (as COMMAND [SUBCOMMAND] -h does)."
	c.examples = []string{"compactrl help", "compactrl help train", "compactrl help eval checkpoint"}
	c.maxArgs = 2
	pos, err := c.parse(e, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		usage(e.stdout)
		return nil
	}
	cmd, ok := commands()[pos[0]]
	if !ok {
		return c.usageErr("unknown command %q", pos[0])
	}
	return cmd.run(ctx, e, append(pos[1:], "-h"))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, e env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return 2
	}
	if isHelp(args[0]) {
		usage(e.stdout)
		return 0
	}
	c, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "compactrl: unknown command %q\n", args[0])
		usage(e.stderr)
		return 2
	}
	if err := kernel.Err(); err != nil {
		fmt.Fprintf(e.stderr, "compactrl %s: %v\n", args[0], err)
		return 2
	}
	err := c.run(ctx, e, args[1:])
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "compactrl %s: %v\n\n%s", args[0], err, ue.usage)
		return ue.ExitCode()
	}
	fmt.Fprintf(e.stderr, "compactrl %s: %v\n", args[0], err)
	// Commands with a documented exit code (eval and rollout: 3 when some
	// episodes were infra errors, 4 when nothing could be scored;
	// docs/reliability.md) carry it on their error.
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
