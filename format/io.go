package format

import (
	"bufio"
	"io"
	"path/filepath"
)

func dirOf(path string) string { return filepath.Dir(path) }

func newBufWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 1<<20) }
