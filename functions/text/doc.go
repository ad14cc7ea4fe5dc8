// Package text turns raw text into BERT-style WordPiece token ids: int32
// rows of a fixed length with attention masks, ready to batch.
//
// Tokenization follows BERT's reference (google-research/bert
// tokenization.py and Hugging Face's BertTokenizer, "slow" version):
//
//  1. Clean: drop NUL, U+FFFD and control/format characters (categories
//     Cc, Cf, Co, Cs, except tab, newline and carriage return); every
//     whitespace character (space, \t, \n, \r, categories Zs, Zl, Zp)
//     separates words.
//  2. Lowercase (unicode.ToLower per character) when Lowercase is set.
//  3. Strip accents when StripAccents is set: nonspacing marks (Mn) are
//     dropped, and precomposed letters of U+00C0-U+024F (Latin-1
//     Supplement, Latin Extended-A and -B), U+0370-U+04FF (Greek,
//     Cyrillic) and U+1E00-U+1EFF (Latin Extended Additional) are mapped
//     to their base letter, exactly as NFD followed by dropping Mn would
//     (the table in accents.go is generated from Python's unicodedata).
//     Letters outside those blocks keep their accents; golang.org/x/text
//     is not a dependency, so there is no general NFD.
//  4. Split off punctuation, each character a word of its own: Unicode
//     categories P*, plus ASCII symbols ($ + < = > ^ ` | ~), as BERT does;
//     CJK ideographs are split into single characters too.
//  5. WordPiece each word: greedy longest match first from the left,
//     continuation pieces prefixed with "##"; a word with no full split,
//     or longer than MaxCharsPerWord characters, becomes [UNK].
//
// Differences from Python that matter only for exotic input: unassigned
// code points (Cn) are kept rather than dropped, and lowercasing is per
// character (no final-sigma rule, İ lowercases to i).
//
// BuiltinVocab is a small English vocab (4,624 tokens) for demos and
// tests; real jobs load their model's vocab.txt with LoadVocab.
package text
