#!/usr/bin/env python3
"""Regenerates builtin.txt, the tokenizer's built-in English WordPiece vocab.

Usage: python3 generate.py FREQ.txt > builtin.txt

FREQ.txt is "word<TAB>count" lines, most frequent first, as count_words.py
writes them (the committed vocab was made from its counts over English text
on a Debian machine: Python's standard library, Go's source tree,
/usr/share/doc, keeping words of the wamerican dictionary). common-words.txt, beside this script, is a
hand-written list of everyday English words that always go in first.

Layout (one token per line, id = line number from 0):
  [PAD] [UNK] [CLS] [SEP] [MASK]          ids 0..4, as BERT's tools expect
  ASCII punctuation, 0-9, a-z, A-Z, a few Latin-1 letters
  "##" + each digit and letter            so any word splits at worst into characters
  "##" + common English endings
  words: common-words.txt, then FREQ.txt by count, up to WORDS in all
"""
import os
import string
import sys

WORDS = 4500
ENDINGS = """s es ed d ing ings er ers est ly ion ions tion tions ation ations sion ment ments
ness able ible ably al ally ful less ive ity ities ize izes ized izing ise ous ish y ic ical ism ist
ists ian en an or ors ry ty th age ance ence ant ent ure ward wards like ship hood dom ee let
ng on ted ts ns te nt le rs ting ons ent ce ate se ve re ies ds lly ding ity ated nce red tes ct
nts st nd ls ely ned ded sed ge ter ss ring ents ces tor ning ks ne ling ch led tly ates ses us
sing nal ess cts ves et ect tive in res ied nted king ked hes it ial ck cted der hed ered ps ze de
rt ary her onal ar lity zed ht ved ver ms les me tors ine cal""".split()
LATIN1 = "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿß"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out, seen = [], set()

    def add(tok):
        if tok not in seen:
            seen.add(tok)
            out.append(tok)

    for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        add(t)
    chars = string.punctuation + string.digits + string.ascii_lowercase + string.ascii_uppercase + LATIN1
    for c in chars:
        add(c)
    for c in string.digits + string.ascii_lowercase + string.ascii_uppercase + LATIN1:
        add("##" + c)
    for e in ENDINGS:
        add("##" + e)
    with open(os.path.join(here, "common-words.txt")) as f:
        for w in f.read().split():
            add(w)
    with open(sys.argv[1]) as f:
        for line in f:
            if len(out) >= len(chars) + WORDS:
                break
            add(line.split("\t")[0].strip())
    sys.stdout.write("".join(t + "\n" for t in out))


if __name__ == "__main__":
    main()
