package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
)

// textFieldCases are JSON lines for the text op's field "text": the usual
// ones jsonField reads (fast), and those it leaves to jsonObject.
var textFieldCases = []struct {
	line string
	fast bool // read without the map
}{
	{`{"text": "hello"}`, true},
	{`{"id": 3, "text": "The Café served forty-two cups", "meta": {"text": 1, "a": [1, "x", null, true, false, {}, []]}}`, true},
	{`{"text": "a\nb\tc\"d\\e\/f\bg\fh\ri"}`, true},
	{`{"text": "\u00e9\u4e16\uD83D\uDE00 \ud83d\ude00 caf\u00C9"}`, true},
	{`{"text": "lone \ud800 high, lone \udc00 low, \ud800\u0041 high then A, \ud800\ud800\udc00 high then pair, \uDBFF\uDFFF"}`, true},
	{`{"text": "\ud83d"}`, true},
	{`{"text": "\ud83d\\"}`, true},
	{`{"text": "\ud83d\"}`, false},
	{`{"text": "\ud83d\u"}`, false},
	{"{\"text\": \"bad \xff utf8 \xe2\x82 cut, \xed\xa0\x80 surrogate, \xef\xbf\xbd kept\"}", true},
	{"{\"text\": \"bad \xff with\\nescape\"}", true},
	{`{"text": ""}`, true},
	{` {"text":"x"} `, true},
	{"\n\t{\r\n\"text\"\t:\n\"x\"\r}\n", true},
	{"\u00a0{\"text\": \"x\"}\u00a0", true}, // not JSON space, but jsonObject trims it too
	{`{"a": -0.5e+10, "b": 0, "c": 1E5, "d": -12.25, "text": "x"}`, true},
	{`{"text": "x", "text": "y"}`, false},
	{`{"text": 1, "text": "y"}`, false},
	{`{"te\u0078t": "escaped key"}`, false},
	{`{"te\u0078t": "escaped key", "text": "plain"}`, false},
	{"{\"\xff\": \"bad key\", \"text\": \"x\"}", false},
	{`{"nested": {"text": "inner"}}`, false},
	{`{"nested": {"text": "inner"}, "text": "outer"}`, true},
	{`{"Text": "case"}`, false},
	{`{}`, false},
	{`{"text": null}`, false},
	{`{"text": 5}`, false},
	{`{"text": true}`, false},
	{`{"text": {"a": "b"}}`, false},
	{`{"text": ["a", "b\n", null]}`, false},
	{`{"text": ["a", 1]}`, false},
	{`{"text": []}`, false},
	{`null`, false},
	{`[]`, false},
	{`"text"`, false},
	{``, false},
	{`{"text": "x"`, false},
	{`{"text": "x"}}`, false},
	{`{"text": "x"} {}`, false},
	{`{"text": "x",}`, false},
	{`{"text" "x"}`, false},
	{`{text: "x"}`, false},
	{`{"text": 'x'}`, false},
	{`{"text": "x", "a": 01}`, false},
	{`{"text": "x", "a": 1.}`, false},
	{`{"text": "x", "a": .5}`, false},
	{`{"text": "x", "a": 1e}`, false},
	{`{"text": "x", "a": +1}`, false},
	{`{"text": "x", "a": -}`, false},
	{`{"text": "x", "a": tru}`, false},
	{`{"text": "x", "a": truex}`, false},
	{`{"text": "x", "a": NaN}`, false},
	{`{"text": "x", "a": [1,]}`, false},
	{`{"text": "x", "a": [1 2]}`, false},
	{`{"text": "bad \x escape"}`, false},
	{`{"text": "bad \u12g4 escape"}`, false},
	{"{\"text\": \"raw\ttab\"}", false},
	{"{\"text\": \"raw\nnewline\"}", false},
	{"{\"text\": \"del \x7f ok\"}", true},
	{`{"text": "x", "a": ` + strings.Repeat("[", 150) + strings.Repeat("]", 150) + `}`, false},
	{`{"text": "x", "a": ` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`, true},
	{`{"text": "x", "a": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, false},
}

// textBoth runs the text op on a jsonl line both ways: as it does, and
// from jsonObject's map (the code before jsonField), on fresh states.
func textBoth(o *textOp, line []byte) (got, want *state, gotErr, wantErr error) {
	s := wds.Sample{Key: "k", Files: map[string][]byte{"jsonl": line}}
	got, want = newState(), newState()
	got.start(context.Background(), s, 1, 0, nil, false)
	want.start(context.Background(), s, 1, 0, nil, false)
	gotErr = o.apply(got)
	wantErr = o.fromObject(want, jsonMembers)
	return got, want, gotErr, wantErr
}

func sameText(got, want *state, gotErr, wantErr error) string {
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		return fmt.Sprintf("error %v, want %v", gotErr, wantErr)
	}
	if got.text != want.text || !slices.Equal(got.segments, want.segments) {
		return fmt.Sprintf("text %q segments %q, want %q %q", got.text, got.segments, want.text, want.segments)
	}
	return ""
}

// labelRef is fieldLabel before jsonField: from jsonObject's map.
func labelRef(st *state, field string) (int64, error) {
	obj, member, err := st.jsonObject()
	if err != nil {
		return 0, err
	}
	raw, ok := obj[field]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return NoLabel, nil
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("member %s field %s %s: want an integer class label", member, field, clip(string(raw), 32))
	}
	return v, nil
}

// sameLabel compares fieldLabel with labelRef on line.
func sameLabel(line []byte, field string) string {
	s := wds.Sample{Key: "k", Files: map[string][]byte{"jsonl": line}}
	got, want := newState(), newState()
	got.start(context.Background(), s, 1, 0, nil, false)
	want.start(context.Background(), s, 1, 0, nil, false)
	gv, gerr := fieldLabel(got, field)
	wv, werr := labelRef(want, field)
	if gv != wv || fmt.Sprint(gerr) != fmt.Sprint(werr) {
		return fmt.Sprintf("label %s: %d, %v; want %d, %v", field, gv, gerr, wv, werr)
	}
	return ""
}

func TestTextFieldMatchesObject(t *testing.T) {
	o := &textOp{source: "auto", field: "text"}
	for _, c := range textFieldCases {
		line := []byte(c.line)
		got, want, gotErr, wantErr := textBoth(o, line)
		if d := sameText(got, want, gotErr, wantErr); d != "" {
			t.Errorf("%.80q: %s", c.line, d)
		}
		raw, found, ok := scanField(bytes.TrimSpace(line), "text")
		if fast := ok && found && raw[0] == '"'; fast != c.fast {
			t.Errorf("%.80q: read without the map %v, want %v", c.line, fast, c.fast)
		}
		for _, f := range []string{"text", "a", "id", "b", "missing"} {
			if d := sameLabel(line, f); d != "" {
				t.Errorf("%.80q: %s", c.line, d)
			}
		}
	}
}

// The text op with jsonField and the label after it, as a pipeline runs
// them: the label reads the map the text op's fallback left, or its own
// scan.
func TestTextFieldThenLabel(t *testing.T) {
	p := lookupSpec(t, "label: {field: label}\nops:\n  - {op: text, source: jsonl}\n  - wordpiece\n")
	for _, c := range []struct {
		line  string
		label int64
		err   string
	}{
		{`{"text": "hi", "label": 4}`, 4, ""},
		{`{"text": ["hi", "there"], "label": 5}`, 5, ""},
		{`{"text": "hi"}`, NoLabel, ""},
		{`{"text": "hi", "label": null}`, NoLabel, ""},
		{`{"text": "hi", "label": "x"}`, 0, `member jsonl field label "x": want an integer class label`},
		{`{"text": "hi", "label": 1.5}`, 0, `member jsonl field label 1.5: want an integer class label`},
		{`{"text": "hi", "label": 3, "label": 7}`, 7, ""},
	} {
		out, err := p.Process(wds.Sample{Key: "k", Files: map[string][]byte{"jsonl": []byte(c.line)}}, 1)
		if errText := fmt.Sprint(err); err == nil && c.err != "" || err != nil && errText != c.err {
			t.Errorf("%s: error %v, want %q", c.line, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if l := int64s(out.Fields[len(out.Fields)-1].Data)[0]; l != c.label {
			t.Errorf("%s: label %d, want %d", c.line, l, c.label)
		}
	}
}

func lookupSpec(t *testing.T, spec string) Pipeline {
	t.Helper()
	p, err := Lookup(spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FuzzTextField checks the text op and the JSON label on any line and
// field against the same read from jsonObject's map (encoding/json), and
// that jsonField's raw value is the map's.
func FuzzTextField(f *testing.F) {
	for _, c := range textFieldCases {
		f.Add([]byte(c.line), "text")
	}
	f.Add([]byte(`{"a": {"b": [1, 2.5e-3]}, "label": 3}`), "label")
	f.Add([]byte(`{"": ""}`), "")
	f.Add([]byte("{\"\xef\xbf\xbd\": \"x\"}"), "\ufffd")
	f.Fuzz(func(t *testing.T, line []byte, field string) {
		if field == "" {
			return // the op's params reject it; labels take any
		}
		o := &textOp{source: "jsonl", field: field}
		got, want, gotErr, wantErr := textBoth(o, line)
		if d := sameText(got, want, gotErr, wantErr); d != "" {
			t.Fatalf("%q field %q: %s", line, field, d)
		}
		if d := sameLabel(line, field); d != "" {
			t.Fatalf("%q: %s", line, d)
		}
		raw, found, ok := scanField(bytes.TrimSpace(line), field)
		if !ok {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(bytes.TrimSpace(line), &obj); err != nil || obj == nil {
			t.Fatalf("%q: scanField takes a line encoding/json does not: %v", line, err)
		}
		if v, has := obj[field]; has != found || !bytes.Equal(v, raw) {
			t.Fatalf("%q field %q: raw %q %v, want %q %v", line, field, raw, found, v, has)
		}
	})
}
