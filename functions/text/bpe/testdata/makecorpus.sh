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
#   - the first 900 text lines (groff requests dropped) of the translated
#     man pages of /usr/share/man/{ru,ja,ko,de,fr,pl,es,tr} (manpages-l10n,
#     man-db, shadow, procps, psmisc translations; GPL-2+/GPL-3+ and
#     BSD-3-Clause documentation, shipped here unchanged as test input).
# One sample a line; blank lines dropped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
xtext=$(cd "$here" && go list -m -f '{{.Dir}}' golang.org/x/text)
{
  for f in BSD CC0-1.0 Artistic Apache-2.0 GPL-1 GPL-2 GPL-3 LGPL-2 LGPL-2.1 LGPL-3 MPL-1.1 MPL-2.0 GFDL-1.2 GFDL-1.3; do
    cat "/usr/share/common-licenses/$f"
  done
  for f in candide rashomon sunzi-bingfa-simplified sunzi-bingfa-traditional unsu-joh-eun-nal; do
    tail -n +4 "$xtext/encoding/testdata/$f-utf-8.txt"
  done
  for l in ru ja ko de fr pl es tr; do
    for p in /usr/share/man/$l/man*/*.gz; do zcat "$p"; done | grep -v -e '^\.' -e "^'" | head -n 900 || true
  done
} | grep -v '^[[:space:]]*$' | gzip -9n > "$here/corpus.txt.gz"
zcat "$here/corpus.txt.gz" | wc -l
