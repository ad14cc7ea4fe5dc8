#!/usr/bin/env python3
"""Writes golden.jsonl: BERT's reference tokenization of test texts.

The tokenizer below is google-research/bert's tokenization.py
(BasicTokenizer + WordpieceTokenizer, Apache-2.0) transcribed, with Hugging
Face BertTokenizer's two changes: control characters are all of category C*,
and accents can be stripped without lowercasing. The Go tokenizer must give the same ids for every line.

Usage: python3 bert_reference.py > golden.jsonl   (from this directory)
"""
import json
import unicodedata


def load_vocab(path):
    vocab = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            vocab[line.rstrip("\n")] = i
    return vocab


def _is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    # Hugging Face's test (any "C*" category); google-research/bert's
    # drops only Cc and Cf.
    return unicodedata.category(char).startswith("C")


def _is_punctuation(char):
    cp = ord(char)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
    return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or (0x20000 <= cp <= 0x2A6DF)
            or (0x2A700 <= cp <= 0x2B73F) or (0x2B740 <= cp <= 0x2B81F) or (0x2B820 <= cp <= 0x2CEAF)
            or (0xF900 <= cp <= 0xFAFF) or (0x2F800 <= cp <= 0x2FA1F))


def basic_tokenize(text, lower, strip):
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        out.append(" " if _is_whitespace(ch) else ch)
    text = "".join(out)
    out = []
    for ch in text:
        out.append(" " + ch + " " if _is_chinese_char(ord(ch)) else ch)
    tokens = "".join(out).split()
    split = []
    for tok in tokens:
        if lower:
            tok = tok.lower()
        if strip:
            tok = "".join(c for c in unicodedata.normalize("NFD", tok) if unicodedata.category(c) != "Mn")
        cur = []
        for ch in tok:
            if _is_punctuation(ch):
                if cur:
                    split.append("".join(cur))
                    cur = []
                split.append(ch)
            else:
                cur.append(ch)
        if cur:
            split.append("".join(cur))
    return split


def wordpiece(vocab, token, max_chars=100):
    chars = list(token)
    if len(chars) > max_chars:
        return ["[UNK]"]
    out, start = [], 0
    while start < len(chars):
        end, cur = len(chars), None
        while start < end:
            sub = "".join(chars[start:end])
            if start > 0:
                sub = "##" + sub
            if sub in vocab:
                cur = sub
                break
            end -= 1
        if cur is None:
            return ["[UNK]"]
        out.append(cur)
        start = end
    return out


TEXTS = [
    "Hello, world! This is a test.",
    " \tHeLLo!how  \n Are yoU?  ",
    "H\u00e9llo caf\u00e9 na\u00efve fa\u00e7ade r\u00e9sum\u00e9 \u00dcber Stra\u00dfe",
    "unwanted running unaffable tokenization preprocessing",
    "Sluice's throughput: 12,345 samples/s (p99 < 3ms) -- $4.50 @ 10% off; x^2 + y_1 = {a|b} ~ `q`",
    "ah\u535a\u63a8zz \u4e2d\u6587\u5b57 mixed\u65e5\u672c\u8a9etext",
    "control\x00chars\x07and\x0bvertical\x0ctab\ufeffbom\u200bzero\u00adsoft",
    "non\u00a0breaking\u3000ideographic\u2003em\u2028line\u2029para",
    "\u00c0\u00c1\u00c2\u00c3\u00c4\u00c5 \u0100\u0102\u0104 \u0106\u010c \u0141\u00f8\u00e6\u00f0 \u0150\u0170 \u1ea0\u1ec7\u1ef9",
    "decomposed e\u0301 and a\u0300 with marks",
    "\u0391\u03b8\u03ae\u03bd\u03b1 \u03ac\u03ad\u03af \u0439\u043e\u0433\u0443\u0440\u0442 \u0451\u043b\u043a\u0430",
    "\u201cquotes\u201d \u2018single\u2019 \u2014 dashes \u2013 and\u2026 ellipsis \u00bfqu\u00e9? \u00a1s\u00ed! \u00ab\u00bb",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic",
    "a" * 101 + " " + "b" * 100,
    "private\ue000use emoji \U0001F600 and symbols \u00a9 \u00ae \u2122 \u20ac \u00a3 \u00b0 \u00b1 \u00d7 \u00f7",
    "URLs like https://example.com/path?q=1&r=2#frag and e-mail foo.bar@example.org",
    "Tabs\tand\nnewlines\r\nand   multiple   spaces",
    "",
    "   ",
    "CamelCaseWords and UPPER CASE and MiXeD 123abc abc123 3.14159",
]


def main():
    vocab = load_vocab("../vocab/builtin.txt")
    for text in TEXTS:
        for lower, strip in ((True, True), (False, False), (True, False), (False, True)):
            toks = [t for w in basic_tokenize(text, lower, strip) for t in wordpiece(vocab, w)]
            print(json.dumps({"text": text, "lower": lower, "strip": strip,
                              "tokens": toks, "ids": [vocab[t] for t in toks]}, ensure_ascii=False))


if __name__ == "__main__":
    main()
