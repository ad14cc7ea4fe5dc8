package jsonscan

import (
	"encoding/json"
	"testing"
)

// TestUnquote compares Unquote with encoding/json on strings with every
// escape, and on every two-byte tail after some.
func TestUnquote(t *testing.T) {
	check := func(q string) {
		var want string
		if err := json.Unmarshal([]byte(q), &want); err != nil {
			return
		}
		s := Scanner[string]{S: q}
		if _, ok := s.Str(); !ok || s.I != len(q) {
			t.Errorf("%q: Str does not pass it", q)
			return
		}
		if got := Unquote([]byte(q[1 : len(q)-1])); got != want {
			t.Errorf("%q: Unquote %q, want %q", q, got, want)
		}
	}
	for _, q := range []string{`""`, `"\"\\\/\b\f\n\r\t"`, `"\u0000\u001f\u007f\u0080\u07ff\u0800\uffff\ufffd"`,
		`"\ud800"`, `"\udfff"`, `"\ud800\udc00"`, `"\udbff\udfff"`, `"\udc00\ud800"`, `"\ud800x"`, `"\ud800\n"`,
		`"\ud800\\u0041"`, `"\ud800\ud800\udc00"`, "\"\xc0\xaf \xf4\x90\x80\x80 \xf0\x9f\x98\"", "\"\xf0\x9f\x98\x80\\n\xf0\""} {
		check(q)
	}
	for _, pre := range []string{`\ud83d`, `\u00e9`, `\n`, "\xe2\x82", ""} {
		for a := range 256 {
			for _, b := range []byte{'a', '\\', 0x80, 0xac, 0xff} {
				check(`"` + pre + string([]byte{byte(a), b}) + `"`)
			}
		}
	}
}
