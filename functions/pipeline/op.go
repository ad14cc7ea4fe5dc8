package pipeline

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Type is the kind of value flowing from one op to the next. Validation
// checks that each op accepts what the op before it gives.
type Type string

// The value types. Terminal types become the output's fields; a pipeline
// must end with one.
const (
	TypeSample       Type = "sample"        // the raw WebDataset sample; every pipeline starts with it
	TypeEncodedImage Type = "encoded_image" // image bytes and header size, decoded lazily by the next op
	TypeImageU8      Type = "image_u8"      // decoded 8-bit RGB, HWC
	TypeTensorU8HWC  Type = "tensor_u8_hwc" // terminal: "image" U8 [H,W,3]
	TypeTensorF32CHW Type = "tensor_f32_chw"
	TypeTensorF16CHW Type = "tensor_f16_chw"
	TypeText         Type = "text"
	TypeTokens       Type = "tokens"  // terminal: "input_ids", "attention_mask" (+ "segment_ids")
	TypeTabular      Type = "tabular" // terminal: "label", "dense", "sparse"
	TypeIDs          Type = "ids"     // a document's token ids, unpadded (bpe with mode: ids)
	// TypePacked is terminal: a shard's documents packed into rows
	// ("input_ids", "position_ids", "cu_seqlens", "num_seqs",
	// "attention_mask"), made by a Packer over the whole shard.
	TypePacked Type = "packed"
)

// Terminal reports whether a pipeline may end with a value of type t.
func (t Type) Terminal() bool {
	switch t {
	case TypeTensorU8HWC, TypeTensorF32CHW, TypeTensorF16CHW, TypeTokens, TypeTabular, TypePacked:
		return true
	}
	return false
}

// ParamType is the type of an op parameter's value.
type ParamType string

// The parameter types. In YAML and JSON a list is a sequence; a single
// number is accepted where a list is expected and means a list of one.
const (
	ParamInt    ParamType = "int"
	ParamFloat  ParamType = "float" // an integer is accepted too
	ParamBool   ParamType = "bool"
	ParamString ParamType = "string"
	ParamFloats ParamType = "list of float"
	ParamInts   ParamType = "list of int"
)

// Param describes one parameter of an op.
type Param struct {
	Name string
	Type ParamType
	// Default is used when a spec leaves the parameter out: an int,
	// float64, bool, string, []float64 or []int as Type says.
	Default any
	Doc     string
	// Min and Max bound a number, or every element of a list, inclusive,
	// when Bounded is set.
	Bounded  bool
	Min, Max float64
	// Len is the exact length a list must have; 0 allows any non-empty list.
	Len int
	// Values lists the allowed values of a string parameter; empty allows any.
	Values []string
	// Required is a parameter a spec must set: it has no default that
	// works everywhere (the bpe op's tokenizer file).
	Required bool
	// Check adds a constraint the fields above cannot express (a range's
	// min <= max); it gets the converted value and says what is wanted.
	Check func(v any) error
}

// Allowed says in a few words which values the parameter takes, for
// error messages and listings.
func (p Param) Allowed() string {
	var parts []string
	if p.Len > 0 {
		parts = append(parts, fmt.Sprintf("%d values", p.Len))
	}
	if p.Bounded {
		parts = append(parts, formatNumber(p.Min, p.Type)+".."+formatNumber(p.Max, p.Type))
	}
	if len(p.Values) > 0 {
		parts = append(parts, "one of "+strings.Join(p.Values, ", "))
	}
	if len(parts) == 0 {
		return string(p.Type)
	}
	return strings.Join(parts, " in ")
}

func formatNumber(v float64, t ParamType) string {
	if t == ParamInt || t == ParamInts {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// OpSpec is an op as registered: what it is called, what it takes and
// gives, and how to build it.
type OpSpec struct {
	Name string
	// Doc says in one line what the op does.
	Doc    string
	Params []Param
	// In lists the value types the op accepts.
	In []Type
	// Out is the type it gives; OutFor, when set, decides it from the
	// parameters instead (normalize's dtype).
	Out    Type
	OutFor func(Params) Type
	// build makes the runnable op from validated parameters; an error
	// (a vocab file that cannot be read) is a validation problem.
	build func(Params, Options) (stage, error)
}

// Output is the type the op gives with these parameters.
func (s OpSpec) Output(p Params) Type {
	if s.OutFor != nil {
		return s.OutFor(p)
	}
	return s.Out
}

// Accepts reports whether the op takes values of type t.
func (s OpSpec) Accepts(t Type) bool { return slices.Contains(s.In, t) }

// Param returns the named parameter's description.
func (s OpSpec) Param(name string) (Param, bool) {
	for _, p := range s.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// Ops lists the registered ops in the order a pipeline usually uses them.
func Ops() []OpSpec {
	return slices.Concat(imageOps(), textOps(), tabularOps())
}

// LookupOp returns the op registered under name.
func LookupOp(name string) (OpSpec, bool) {
	for _, s := range Ops() {
		if s.Name == name {
			return s, true
		}
	}
	return OpSpec{}, false
}

// Params are an op's validated parameters: every declared parameter is
// present, with the Go type its ParamType says (int, float64, bool,
// string, []float64, []int).
type Params map[string]any

// Int returns an int parameter (0 if absent, which validation rules out).
func (p Params) Int(name string) int { v, _ := p[name].(int); return v }

// Float returns a float parameter.
func (p Params) Float(name string) float64 { v, _ := p[name].(float64); return v }

// Bool returns a bool parameter.
func (p Params) Bool(name string) bool { v, _ := p[name].(bool); return v }

// String returns a string parameter.
func (p Params) String(name string) string { v, _ := p[name].(string); return v }

// Floats returns a list-of-float parameter.
func (p Params) Floats(name string) []float64 { v, _ := p[name].([]float64); return v }

// Ints returns a list-of-int parameter.
func (p Params) Ints(name string) []int { v, _ := p[name].([]int); return v }

// convert turns a parameter value as written (YAML/JSON scalars become
// int64, float64, bool or string; sequences []any; Go callers may pass
// int, []float64...) into the parameter's Go type, checking it. The error
// says what was wanted, without the parameter's name.
func (p Param) convert(v any) (any, error) {
	switch p.Type {
	case ParamInt:
		n, ok := asInt(v)
		if !ok {
			return nil, fmt.Errorf("want an integer")
		}
		if p.Bounded && (float64(n) < p.Min || float64(n) > p.Max) {
			return nil, fmt.Errorf("want %s", p.Allowed())
		}
		return p.check(n)
	case ParamFloat:
		f, ok := asFloat(v)
		if !ok {
			return nil, fmt.Errorf("want a number")
		}
		if p.Bounded && (f < p.Min || f > p.Max) {
			return nil, fmt.Errorf("want %s", p.Allowed())
		}
		return p.check(f)
	case ParamBool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want true or false")
		}
		return p.check(b)
	case ParamString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a string")
		}
		if len(p.Values) > 0 && !slices.Contains(p.Values, s) {
			return nil, fmt.Errorf("want %s", p.Allowed())
		}
		return p.check(s)
	case ParamFloats, ParamInts:
		items, ok := asList(v)
		if !ok {
			return nil, fmt.Errorf("want a list of numbers")
		}
		if (p.Len > 0 && len(items) != p.Len) || len(items) == 0 {
			if p.Len > 0 {
				return nil, fmt.Errorf("want a list of %d numbers, got %d", p.Len, len(items))
			}
			return nil, fmt.Errorf("want a non-empty list")
		}
		var fs []float64
		var is []int
		for _, it := range items {
			var f float64
			if p.Type == ParamInts {
				n, ok := asInt(it)
				if !ok {
					return nil, fmt.Errorf("want a list of integers")
				}
				is, f = append(is, n), float64(n)
			} else {
				var ok bool
				if f, ok = asFloat(it); !ok {
					return nil, fmt.Errorf("want a list of numbers")
				}
				fs = append(fs, f)
			}
			if p.Bounded && (f < p.Min || f > p.Max) {
				return nil, fmt.Errorf("want each in %s", formatNumber(p.Min, p.Type)+".."+formatNumber(p.Max, p.Type))
			}
		}
		if p.Type == ParamInts {
			return p.check(is)
		}
		return p.check(fs)
	}
	return nil, fmt.Errorf("parameter type %q is not supported", p.Type)
}

func (p Param) check(v any) (any, error) {
	if p.Check != nil {
		if err := p.Check(v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), true
	case int32:
		return int(n), true
	case uint64:
		return int(n), n <= 1<<62
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	if n, ok := asInt(v); ok {
		return float64(n), true
	}
	return 0, false
}

func asList(v any) ([]any, bool) {
	switch l := v.(type) {
	case []any:
		return l, true
	case []float64:
		out := make([]any, len(l))
		for i, f := range l {
			out[i] = f
		}
		return out, true
	case []int:
		out := make([]any, len(l))
		for i, n := range l {
			out[i] = n
		}
		return out, true
	}
	if _, ok := asFloat(v); ok {
		return []any{v}, true // a single number is a list of one
	}
	return nil, false
}

// formatValue writes a parameter value as a spec would.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []any, []float64, []int:
		l, _ := asList(x)
		parts := make([]string, len(l))
		for i, e := range l {
			parts[i] = formatValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return "{...}"
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
}
