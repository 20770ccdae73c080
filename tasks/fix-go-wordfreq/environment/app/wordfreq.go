// Command wordfreq prints the most frequent words of its standard input.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode"
)

// WordCount is one word and how often it occurs.
type WordCount struct {
	Word  string
	Count int
}

// TopWords returns the n most frequent words of text, most frequent first;
// words with equal counts are in alphabetical order. Words are maximal runs
// of letters and digits, compared case-insensitively (reported in lower
// case). Fewer than n are returned when text has fewer distinct words.
func TopWords(text string, n int) []WordCount {
	counts := map[string]int{}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) }) {
		counts[w]++
	}
	out := make([]WordCount, 0, len(counts))
	for w, c := range counts {
		out = append(out, WordCount{w, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func main() {
	n := flag.Int("n", 3, "how many words to print")
	flag.Parse()
	b, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordfreq:", err)
		os.Exit(1)
	}
	for _, wc := range TopWords(string(b), *n) {
		fmt.Printf("%d %s\n", wc.Count, wc.Word)
	}
}
