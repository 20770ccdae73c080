package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// --format verl is refused with an error that points at the service.
func TestExportVerlRemoved(t *testing.T) {
	var out, errb bytes.Buffer
	err := runExportEpisodes(context.Background(), env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, []string{"--format", "verl"})
	if err == nil || !strings.Contains(err.Error(), "compactrl serve") || !strings.Contains(err.Error(), "--format verl") {
		t.Fatalf("verl: %v", err)
	}
}

// The CLI reaches the episode export through `compactrl export --format`.
func TestExportEpisodesThroughCLI(t *testing.T) {
	f, err := os.Open("../../episode/export/testdata/episodes.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), env{stdin: f, stdout: &out, stderr: &errb}, []string{"export", "--format", "slime"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Fatalf("%d records from stdin, want 3", n)
	}
}
