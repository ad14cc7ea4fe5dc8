package pipeline

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/format/safetensors"
)

// NoLabel is the label of a sample that has none: its label member (or
// JSON field) is missing, e.g. a lone JPEG or a folder of images without
// .cls files. A label present but not an integer still fails the sample.
// It is -1 rather than an absent tensor so that labelled and unlabelled
// samples stack into one chunk; -1 is what torchvision (STL10's unlabeled
// split) and Hugging Face datasets give unlabelled samples, and a trainer
// masks it (label >= 0) or passes ignore_index=-1 to its loss.
const NoLabel = -1

// readLabel makes the "label" I64 [] field from where l says.
func readLabel(st *state, l Label) (Field, error) {
	var v int64
	var err error
	if l.Member != "" {
		v, err = memberLabel(st, l.Member)
	} else {
		v, err = fieldLabel(st, l.Field)
	}
	if err != nil {
		return Field{}, err
	}
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(v))
	return Field{Name: "label", DType: safetensors.I64, Shape: []int{}, Data: b}, nil
}

// memberLabel reads an ASCII integer member, surrounding whitespace
// allowed (WebDataset writers often add a newline); NoLabel without one.
func memberLabel(st *state, member string) (int64, error) {
	b, ok := st.sample.Files[member]
	if !ok {
		return NoLabel, nil
	}
	txt := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(txt, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("member %s %q: want an integer class label", member, clip(txt, 32))
	}
	return v, nil
}

// fieldLabel reads an integer field of the sample's JSON object; NoLabel
// when the object has no such field or the sample no JSON member.
func fieldLabel(st *state, field string) (int64, error) {
	if !st.hasAny(jsonMembers) {
		return NoLabel, nil
	}
	raw, member, found, ok := st.jsonField(jsonMembers, field) // no map if it can
	if !ok {
		obj, m, err := st.jsonObject()
		if err != nil {
			return 0, err
		}
		v, has := obj[field]
		raw, member, found = v, m, has
	}
	if !found || string(bytes.TrimSpace(raw)) == "null" {
		return NoLabel, nil
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("member %s field %s %s: want an integer class label", member, field, clip(string(raw), 32))
	}
	return v, nil
}

// jsonMembers are the members read as a sample's JSON object, in order.
var jsonMembers = []string{"jsonl", "json"}

// jsonObject parses the sample's JSON member (the first of members it has;
// jsonMembers if none are given) once per sample.
func (st *state) jsonObject(members ...string) (map[string]json.RawMessage, string, error) {
	if len(members) == 0 {
		members = jsonMembers
	}
	for _, m := range members {
		b, ok := st.sample.Files[m]
		if !ok {
			continue
		}
		if st.json == nil || st.jsonMember != m {
			st.jsonMember = m
			if err := json.Unmarshal(bytes.TrimSpace(b), &st.json); err != nil || st.json == nil {
				st.json = nil
				if err == nil {
					err = fmt.Errorf("got %s", clip(string(b), 32))
				}
				return nil, m, fmt.Errorf("member %s: want a JSON object: %w", m, err)
			}
		}
		return st.json, m, nil
	}
	return nil, "", fmt.Errorf("no %s member (sample has %s)", strings.Join(members, " or "), describeMembers(st.sample))
}

// hasAny reports whether the sample has one of members.
func (st *state) hasAny(members []string) bool {
	for _, m := range members {
		if _, ok := st.sample.Files[m]; ok {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
