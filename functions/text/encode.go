package text

// Encode frames text as one model input row of exactly maxLen ids:
// [CLS] tokens [SEP], tokens cut so [SEP] still fits, then [PAD]s. mask is
// 1 for [CLS], the tokens and [SEP], 0 for padding. With maxLen 1 there is
// room for [CLS] only; maxLen <= 0 gives empty rows.
func (t *Tokenizer) Encode(text string, maxLen int) (ids, mask []int32) {
	if maxLen <= 0 {
		return []int32{}, []int32{}
	}
	s := t.scratch.Get().(*scratch)
	defer t.scratch.Put(s)
	s.toks = t.AppendTokens(s.toks[:0], text)

	ids, mask = make([]int32, maxLen), make([]int32, maxLen)
	ids[0], mask[0] = t.cls, 1
	n := 1
	if maxLen >= 2 {
		n += copy(ids[1:maxLen-1], s.toks)
		ids[n] = t.sep
		n++
	}
	for i := 1; i < n; i++ {
		mask[i] = 1
	}
	for i := n; i < maxLen; i++ {
		ids[i] = t.pad
	}
	return ids, mask
}

// Pack puts several segments of one sample (sentences, a question and its
// passage) into one row of exactly maxLen ids: [CLS] s1 [SEP] s2 [SEP] ...
// then [PAD]s. Segments go in whole, in order, while they fit; the first
// one that does not is cut so that it still ends with its [SEP] (if at
// least one of its tokens fits), and the segments after it are dropped.
// segmentIDs is the 1-based segment of each id ([CLS] is in segment 1, each
// [SEP] in the segment it closes), 0 for padding; mask is 1 where
// segmentIDs is not 0. truncated counts the WordPiece tokens left out
// (not the [SEP]s they would have needed).
func (t *Tokenizer) Pack(segments []string, maxLen int) (ids, mask, segmentIDs []int32, truncated int) {
	if maxLen <= 0 {
		for _, seg := range segments {
			truncated += len(t.Tokenize(seg))
		}
		return []int32{}, []int32{}, []int32{}, truncated
	}
	s := t.scratch.Get().(*scratch)
	defer t.scratch.Put(s)

	ids, mask, segmentIDs = make([]int32, maxLen), make([]int32, maxLen), make([]int32, maxLen)
	ids[0], segmentIDs[0] = t.cls, 1
	n := 1
	full := false
	for i, seg := range segments {
		s.toks = t.AppendTokens(s.toks[:0], seg)
		if full {
			truncated += len(s.toks)
			continue
		}
		room := maxLen - n - 1 // tokens that fit before this segment's [SEP]
		if room < 0 || (room < len(s.toks) && room == 0) {
			// Not even one token (or, for an empty segment, the [SEP]).
			truncated += len(s.toks)
			full = true
			continue
		}
		take := min(room, len(s.toks))
		truncated += len(s.toks) - take
		full = take < len(s.toks)
		copy(ids[n:], s.toks[:take])
		ids[n+take] = t.sep
		for j := n; j <= n+take; j++ {
			segmentIDs[j] = int32(i + 1)
		}
		n += take + 1
	}
	for i := range n {
		mask[i] = 1
	}
	for i := n; i < maxLen; i++ {
		ids[i] = t.pad
	}
	return ids, mask, segmentIDs, truncated
}
