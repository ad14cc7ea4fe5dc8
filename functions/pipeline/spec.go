package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/internal/safeyaml"
)

// Definition is a pipeline as declared: the ops in order and where the
// label comes from. A YAML or JSON spec document decodes into one:
//
//	name: flowers-train          # optional; the pipeline's name in logs ("custom" if left out)
//	label: {member: cls}         # or {field: label} (a JSON member's field), or none (the default)
//	ops:
//	  - decode                   # an op with default parameters
//	  - op: random_resized_crop  # or a mapping: "op" names it, the other keys are parameters
//	    size: 224
//	    scale: [0.08, 1]
//	  - op: random_horizontal_flip
//	  - op: normalize
//	    dtype: f16
type Definition struct {
	Name string
	// Doc says in a line what the pipeline outputs (built-ins only).
	Doc   string
	Label Label
	Ops   []OpCall

	labelLine int
}

// OpCall is one op of a Definition with the parameters the spec sets;
// the others take their defaults.
type OpCall struct {
	Op     string
	Params map[string]any

	line       int
	paramLines map[string]int
}

// Label says which member of a sample holds its integer class label; the
// zero Label means none (the pipeline outputs no "label" field unless an
// op, like criteo, makes one). A sample without that member or field is
// unlabelled and gets NoLabel (-1); one whose label is not an integer fails.
type Label struct {
	// Member is a member holding an ASCII integer ("cls").
	Member string `json:"member,omitempty"`
	// Field is a field of the sample's JSON object (the "jsonl" or "json"
	// member) holding an integer.
	Field string `json:"field,omitempty"`
}

// None reports whether the label is left out.
func (l Label) None() bool { return l.Member == "" && l.Field == "" }

// Problem is one thing wrong with a pipeline spec.
type Problem struct {
	// Line is the 1-based line in the spec document; 0 when unknown (a
	// Definition built in Go, or a JSON spec on one line).
	Line int
	// Op is the index in ops, or -1 for a problem outside any op.
	Op     int
	OpName string
	Msg    string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Op >= 0 {
		fmt.Fprintf(&b, "ops[%d]", p.Op)
		if p.OpName != "" {
			fmt.Fprintf(&b, " (%s)", p.OpName)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ValidationError lists everything wrong with a pipeline spec, found
// before any sample is processed.
type ValidationError struct {
	Pipeline string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return fmt.Sprintf("invalid pipeline %q: %s", e.Pipeline, e.Problems[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid pipeline %q (%d problems):", e.Pipeline, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// errNotDocument is a spec that is a lone word, not a mapping: most
// likely a misspelt pipeline name.
var errNotDocument = errors.New("pipeline spec: want a mapping with ops (and optionally name, label), not a single value")

// defaultName names a pipeline whose spec gives no name.
const defaultName = "custom"

// MaxSpecBytes caps a pipeline spec document. A spec is a few hundred
// bytes; the cap keeps what parsing one may cost small, since every
// replica parses the spec each task carries.
const MaxSpecBytes = 64 << 10

// ParseDefinition decodes a YAML or JSON spec document (JSON when its
// first non-blank character is '{'). Structural problems (unknown keys, an
// op without a name) come back as a *ValidationError; parameters and types
// are checked by Build.
func ParseDefinition(doc []byte) (Definition, error) {
	d, probs, err := parseDefinition(doc)
	if err != nil {
		return Definition{}, err
	}
	if len(probs) > 0 {
		return d, &ValidationError{Pipeline: nameOr(d.Name), Problems: probs}
	}
	return d, nil
}

// Parse decodes and builds a pipeline spec document, reporting every
// problem in it at once as a *ValidationError.
func Parse(doc []byte, o Options) (Pipeline, error) {
	d, probs, err := parseDefinition(doc)
	if err != nil {
		return nil, err
	}
	p, more := compile(d, o)
	probs = append(probs, more...)
	if len(probs) > 0 {
		return nil, &ValidationError{Pipeline: nameOr(d.Name), Problems: byLine(probs)}
	}
	return p, nil
}

// byLine orders problems as they appear in the document, when each has a
// line; otherwise they stay in the order found (ops in order).
func byLine(probs []Problem) []Problem {
	for _, p := range probs {
		if p.Line == 0 {
			return probs
		}
	}
	slices.SortStableFunc(probs, func(a, b Problem) int { return a.Line - b.Line })
	return probs
}

// LoadFile reads and builds a YAML or JSON pipeline spec file.
func LoadFile(path string, o Options) (Pipeline, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading pipeline spec: %w", err)
	}
	p, err := Parse(doc, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

func nameOr(n string) string {
	if n == "" {
		return defaultName
	}
	return n
}

func parseDefinition(doc []byte) (Definition, []Problem, error) {
	// The size first: nothing of an oversize spec is read.
	if err := safeyaml.CheckSize("pipeline spec", int64(len(doc)), MaxSpecBytes); err != nil {
		return Definition{}, nil, err
	}
	trimmed := bytes.TrimSpace(doc)
	if len(trimmed) == 0 {
		return Definition{}, nil, errors.New("empty pipeline spec")
	}
	var root yaml.Node
	var err error
	if trimmed[0] == '{' {
		// yaml.v3 reads JSON (with line numbers), but JSON's own parser
		// gives the clearer syntax errors.
		if err := json.Unmarshal(trimmed, new(any)); err != nil {
			return Definition{}, nil, fmt.Errorf("pipeline spec is not valid JSON: %s", jsonErr(trimmed, err))
		}
		if root, err = safeyaml.Parse("pipeline spec", trimmed, MaxSpecBytes); err != nil {
			// Valid JSON YAML cannot read (tab indentation): compacted, it
			// can, at the cost of line numbers.
			var c bytes.Buffer
			_ = json.Compact(&c, trimmed)
			if root, err = safeyaml.Parse("pipeline spec", c.Bytes(), MaxSpecBytes); err != nil {
				return Definition{}, nil, fmt.Errorf("reading JSON pipeline spec: %w", err)
			}
			clearLines(&root)
		}
	} else if root, err = safeyaml.Parse("pipeline spec", doc, MaxSpecBytes); err != nil {
		var ae *safeyaml.AliasError
		if errors.As(err, &ae) {
			return Definition{}, nil, fmt.Errorf("pipeline spec: %w", err)
		}
		return Definition{}, nil, fmt.Errorf("pipeline spec is not valid YAML: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return Definition{}, nil, errors.New("empty pipeline spec")
	}
	return decodeDefinition(root.Content[0])
}

func jsonErr(doc []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(doc[:min(int(se.Offset), len(doc))], []byte("\n"))
		return fmt.Sprintf("line %d: %v", line, se)
	}
	return err.Error()
}

func clearLines(n *yaml.Node) {
	n.Line = 0
	for _, c := range n.Content {
		clearLines(c)
	}
}

func decodeDefinition(top *yaml.Node) (Definition, []Problem, error) {
	var d Definition
	var probs []Problem
	add := func(n *yaml.Node, format string, args ...any) {
		probs = append(probs, Problem{Line: n.Line, Op: -1, Msg: fmt.Sprintf(format, args...)})
	}
	if top.Kind == yaml.ScalarNode {
		return d, nil, errNotDocument
	}
	if top.Kind != yaml.MappingNode {
		return d, nil, fmt.Errorf("line %d: pipeline spec: want a mapping with ops (and optionally name, label)", top.Line)
	}
	var ops *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "name", "doc":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				add(v, "%s: want a string", k.Value)
				continue
			}
			if k.Value == "name" {
				d.Name = v.Value
			} else {
				d.Doc = v.Value
			}
		case "label":
			d.labelLine = v.Line
			l, err := decodeLabel(v)
			if err != nil {
				add(v, "label: %v", err)
			}
			d.Label = l
		case "ops":
			ops = v
		default:
			add(k, "unknown key %q: a pipeline spec has name, doc, label and ops", k.Value)
		}
	}
	switch {
	case ops == nil: // Build reports that there are no ops
	case ops.Kind != yaml.SequenceNode:
		add(ops, "ops: want a list of ops")
	default:
		for i, item := range ops.Content {
			call, more := decodeOpCall(i, item)
			probs = append(probs, more...)
			d.Ops = append(d.Ops, call)
		}
	}
	return d, probs, nil
}

func decodeLabel(v *yaml.Node) (Label, error) {
	const want = "want none, {member: NAME} or {field: NAME}"
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Value == "none" || v.Tag == "!!null" {
			return Label{}, nil
		}
		return Label{}, fmt.Errorf("%q: %s", v.Value, want)
	case yaml.MappingNode:
		var l Label
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], v.Content[i+1]
			if k.Value != "member" && k.Value != "field" {
				return Label{}, fmt.Errorf("unknown key %q: %s", k.Value, want)
			}
			if val.Kind != yaml.ScalarNode || val.Tag != "!!str" || val.Value == "" {
				return Label{}, fmt.Errorf("%s: want a name", k.Value)
			}
			switch k.Value {
			case "member":
				l.Member = val.Value
			case "field":
				l.Field = val.Value
			}
		}
		if l.Member != "" && l.Field != "" {
			return Label{}, fmt.Errorf("member and field both set: %s", want)
		}
		if l.None() {
			return Label{}, errors.New(want)
		}
		return l, nil
	}
	return Label{}, errors.New(want)
}

func decodeOpCall(i int, item *yaml.Node) (OpCall, []Problem) {
	call := OpCall{line: item.Line}
	var probs []Problem
	add := func(line int, format string, args ...any) {
		probs = append(probs, Problem{Line: line, Op: i, OpName: call.Op, Msg: fmt.Sprintf(format, args...)})
	}
	switch item.Kind {
	case yaml.ScalarNode:
		if item.Tag != "!!str" || item.Value == "" {
			add(item.Line, "want an op name or a mapping with op and its parameters")
		} else {
			call.Op = item.Value
		}
		return call, probs
	case yaml.MappingNode:
	default:
		add(item.Line, "want an op name or a mapping with op and its parameters")
		return call, probs
	}
	// The name first, so problems with parameters can name the op.
	for j := 0; j+1 < len(item.Content); j += 2 {
		if k, v := item.Content[j], item.Content[j+1]; k.Value == "op" {
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Value == "" {
				add(v.Line, "op: want an op name")
			} else {
				call.Op = v.Value
			}
		}
	}
	if call.Op == "" && len(probs) == 0 {
		add(item.Line, "missing op: want op: NAME")
	}
	for j := 0; j+1 < len(item.Content); j += 2 {
		k, v := item.Content[j], item.Content[j+1]
		if k.Value == "op" {
			continue
		}
		if call.Params == nil {
			call.Params, call.paramLines = map[string]any{}, map[string]int{}
		}
		call.Params[k.Value] = nodeValue(v)
		call.paramLines[k.Value] = k.Line
	}
	return call, probs
}

// nodeValue turns a YAML value into the loose Go form Param.convert
// takes: int64, float64, bool, string, nil, []any or map[string]any.
func nodeValue(n *yaml.Node) any {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int":
			var v int64
			if n.Decode(&v) == nil {
				return v
			}
			var u uint64
			if n.Decode(&u) == nil {
				return u
			}
		case "!!float":
			var v float64
			if n.Decode(&v) == nil {
				return v
			}
		case "!!bool":
			var v bool
			if n.Decode(&v) == nil {
				return v
			}
		case "!!null":
			return nil
		}
		return n.Value
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = nodeValue(c)
		}
		return out
	case yaml.MappingNode:
		out := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			out[n.Content[i].Value] = nodeValue(n.Content[i+1])
		}
		return out
	}
	return nil
}
