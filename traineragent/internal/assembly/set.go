package assembly

import (
	"encoding/base64"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Bitset is a set of small non-negative integers (shard or chunk indices).
type Bitset []uint64

// Add puts i in b.
func (b *Bitset) Add(i int) {
	w := i / 64
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	(*b)[w] |= 1 << (i % 64)
}

func (b Bitset) remove(i int) {
	if w := i / 64; i >= 0 && w < len(b) {
		b[w] &^= 1 << (i % 64)
	}
}

// Has reports whether i is in b.
func (b Bitset) Has(i int) bool {
	w := i / 64
	return i >= 0 && w < len(b) && b[w]&(1<<(i%64)) != 0
}

// minus is b without the members of o.
func (b Bitset) minus(o Bitset) Bitset {
	var out Bitset
	for i, w := range b {
		if i < len(o) {
			w &^= o[i]
		}
		out = append(out, w)
	}
	return out
}

// countBelow counts the members < n.
func (b Bitset) countBelow(n int) int {
	c := 0
	for w, word := range b {
		if w*64 >= n {
			break
		}
		if rest := n - w*64; rest < 64 {
			word &= 1<<rest - 1
		}
		c += bits.OnesCount64(word)
	}
	return c
}

// bitmapPrefix marks a set written as a bitmap rather than as ranges.
const bitmapPrefix = "b:"

// EncodeSet writes b in whichever form is shorter: ranges ("0-4999,5002",
// small when the members are mostly contiguous, as shards completing
// roughly in order are) or a bitmap ("b:" and unpadded base64 of bit i in
// byte i/8, bit i%8: at most n/6 characters however scattered the set is).
func EncodeSet(b Bitset) string {
	var r strings.Builder
	last := -1
	for w := len(b) - 1; w >= 0; w-- {
		if b[w] != 0 {
			last = w*64 + 63 - bits.LeadingZeros64(b[w])
			break
		}
	}
	if last < 0 {
		return ""
	}
	maxLen := len(bitmapPrefix) + base64.RawStdEncoding.EncodedLen(last/8+1)
	for i := 0; i <= last && r.Len() <= maxLen; i++ {
		if !b.Has(i) {
			continue
		}
		j := i
		for j+1 <= last && b.Has(j+1) {
			j++
		}
		if r.Len() > 0 {
			r.WriteByte(',')
		}
		r.WriteString(strconv.Itoa(i))
		if j > i {
			r.WriteByte('-')
			r.WriteString(strconv.Itoa(j))
		}
		i = j
	}
	if r.Len() <= maxLen {
		return r.String()
	}
	raw := make([]byte, last/8+1)
	for i := range raw {
		raw[i] = byte(b[i/8] >> (8 * (i % 8)))
	}
	return bitmapPrefix + base64.RawStdEncoding.EncodeToString(raw)
}

// DecodeSet reads EncodeSet's output; every member must be below limit.
func DecodeSet(s string, limit int) (Bitset, error) {
	var b Bitset
	if s == "" {
		return b, nil
	}
	if rest, ok := strings.CutPrefix(s, bitmapPrefix); ok {
		raw, err := base64.RawStdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("set %.20q: %w", s, err)
		}
		for i, by := range raw {
			for k := range 8 {
				if by&(1<<k) == 0 {
					continue
				}
				if m := 8*i + k; m < limit {
					b.Add(m)
				} else {
					return nil, fmt.Errorf("set %.20q: member %d: want < %d", s, m, limit)
				}
			}
		}
		return b, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		from, err := strconv.Atoi(lo)
		to := from
		if err == nil && isRange {
			to, err = strconv.Atoi(hi)
		}
		if err != nil || from < 0 || to < from {
			return nil, fmt.Errorf("set %.20q: %q: want N or N-M with 0 <= N <= M", s, part)
		}
		if to >= limit {
			return nil, fmt.Errorf("set %.20q: member %d: want < %d", s, to, limit)
		}
		for i := from; i <= to; i++ {
			b.Add(i)
		}
	}
	return b, nil
}
