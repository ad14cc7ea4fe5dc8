#!/usr/bin/env python3
"""Counts English words for generate.py: word<TAB>count, most frequent first.

Usage: python3 count_words.py > /tmp/freq.txt   (needs Debian's wamerican)

Reads Python's standard library, Go's source tree and /usr/share/doc, and
keeps lowercase words of the wamerican dictionary (/usr/share/dict/words).
"""
import collections
import os
import re

ROOTS = ["/usr/lib/python3.11", "/usr/local/go/src", "/usr/share/doc"]

words = set(w.strip() for w in open("/usr/share/dict/words") if re.fullmatch(r"[a-z]+", w.strip()))
count = collections.Counter()
for root in ROOTS:
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not (f.endswith((".py", ".go", ".txt", ".md")) or f == "copyright"):
                continue
            try:
                text = open(os.path.join(dirpath, f), encoding="utf-8", errors="ignore").read()
            except OSError:
                continue
            for w in re.findall(r"(?<![A-Za-z_])[A-Za-z][a-z]+(?![A-Za-z_0-9])", text):
                w = w.lower()
                if w in words:
                    count[w] += 1
for w, c in count.most_common(8000):
    print(f"{w}\t{c}")
