package main

import (
	"context"
	"fmt"
)

func runDemo(ctx context.Context, e env, args []string) error {
	fmt.Fprintln(e.stdout, "compactrl demo: training arrives with the trainer (issue 5); try `compactrl advantages` meanwhile.")
	return nil
}
