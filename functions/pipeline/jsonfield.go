package pipeline

import (
	"bytes"
	"unicode/utf8"

	"github.com/sluice-project/sluice/internal/jsonscan"
)

// One field of a sample's JSON object without decoding the whole object
// into a map: a JSONL document is mostly one long string, and decoding it
// as map[string]json.RawMessage and then the field again as a string made
// encoding/json's scanner pass over it four times. jsonField validates the
// line and finds the field in one strict pass; anything it is not sure of
// (a key with escapes, a duplicate of the field, deep nesting, invalid
// JSON) it leaves to jsonObject, whose result or error then stands.

// jsonField is the raw value of field in the sample's JSON member (the
// first of members it has), as jsonObject's map would hold it. ok is false
// where the caller must take jsonObject's path instead: no such member,
// the member already parsed into st.json, or a line the scan cannot vouch
// for. found is false (with ok) when the object, valid, has no such field.
func (st *state) jsonField(members []string, field string) (raw []byte, member string, found, ok bool) {
	for _, m := range members {
		b, has := st.sample.Files[m]
		if !has {
			continue
		}
		if st.json != nil && st.jsonMember == m {
			return nil, m, false, false // the map is there: use it
		}
		raw, found, ok = scanField(bytes.TrimSpace(b), field)
		return raw, m, found, ok
	}
	return nil, "", false, false
}

// scanField finds the value of the top-level key field in b, which must
// be one JSON object and nothing else. ok is false when b is not valid
// JSON (or nests deeper than jsonscan.MaxDepth: left to encoding/json),
// or is but not in the simple form whose result is plain to see: a key
// with escapes or invalid UTF-8 (its decoded form could be field), or
// field twice (encoding/json keeps the last; left to it).
func scanField(b []byte, field string) (raw []byte, found, ok bool) {
	s := jsonscan.Scanner[[]byte]{S: b}
	if !s.Object(func(key []byte, kind jsonscan.Str) bool {
		if kind&jsonscan.Escaped != 0 || kind&jsonscan.NonASCII != 0 && !utf8.Valid(key) {
			return false
		}
		v0 := s.I
		if !s.Value() {
			return false
		}
		if string(key) == field {
			if found {
				return false
			}
			raw, found = b[v0:s.I], true
		}
		return true
	}) {
		return nil, false, false
	}
	s.SkipSpace()
	return raw, found, s.I == len(b)
}
