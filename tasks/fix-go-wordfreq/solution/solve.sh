#!/bin/bash
# Oracle: split on non-alphanumerics, lower-case, break ties alphabetically.
set -euo pipefail
cd /app
python3 - <<'PY'
import re
p = "wordfreq.go"
s = open(p).read()
s = s.replace(
    "strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) })",
    "strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })",
)
s = s.replace(
    "sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })",
    "sort.Slice(out, func(i, j int) bool {\n\t\tif out[i].Count != out[j].Count {\n\t\t\treturn out[i].Count > out[j].Count\n\t\t}\n\t\treturn out[i].Word < out[j].Word\n\t})",
)
open(p, "w").write(s)
PY
gofmt -l . | (! grep .)
