package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/episode/export"
)

// runExportEpisodes is `compactrl export --format slime|jsonl`: the
// trainable segments of episode JSONL as one JSON record a line (package
// export has the field mapping).
func runExportEpisodes(ctx context.Context, e env, args []string) error {
	fs, o := newExportCmd()
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	var err error
	if o.Format, err = export.ParseFormat(o.format); err != nil {
		return fmt.Errorf("--format %w", err)
	}
	var r io.Reader = e.stdin
	if o.Source != "-" {
		f, err := os.Open(o.Source)
		if err != nil {
			return fmt.Errorf("open episodes: %w", err)
		}
		defer f.Close()
		r = f
	}
	var w io.Writer = e.stdout
	var outFile *os.File
	if o.out != "-" {
		f, err := os.Create(o.out)
		if err != nil {
			return fmt.Errorf("create output: %w", err)
		}
		outFile = f
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	c, err := export.Write(ctx, episode.NewReader(r), bw, o.Options)
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write records: %w", err)
	}
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			return fmt.Errorf("close output: %w", err)
		}
	}
	fmt.Fprintf(e.stderr, "export %s: %d episodes read, %d left out (masked: infra_error, verifier_error, overlong unless kept), %d segment records written\n", o.format, c.Episodes, c.Skipped, c.Records)
	return nil
}

// exportOptions are the flags of `compactrl export` (episodes).
type exportOptions struct {
	export.Options
	format, out string
}

func newExportCmd() (*cmdLine, *exportOptions) {
	fs := newCmdLine("export", "export --format slime|jsonl [--in episodes.jsonl] [--out segments.jsonl]",
		"export gguf --checkpoint DIR --out FILE.gguf   (a checkpoint for llama.cpp: compactrl export gguf -h)")
	fs.examples = []string{"compactrl export --format slime --in adv.jsonl --out slime.jsonl",
		"compactrl advantages < episodes.jsonl | compactrl export --format jsonl"}
	o := &exportOptions{}
	fs.StringVar(&o.format, "format", "", "record format: slime or jsonl")
	fs.StringVar(&o.Source, "in", "-", "episode JSONL with advantages (- for stdin)")
	fs.StringVar(&o.out, "out", "-", "output JSONL (- for stdout)")
	fs.BoolVar(&o.KeepOverlong, "keep-overlong", false, "export overlong episodes too (default: masked, left out)")
	fs.BoolVar(&o.AllowNoAdv, "allow-missing-advantages", false, "export segments without advantages (default: an error, run compactrl advantages first)")
	return fs, o
}
