package pipeline

import (
	"fmt"
	"slices"
	"strings"

	names "github.com/sluice-project/sluice/internal/suggest"
)

// Build validates a definition and builds its pipeline. Every problem
// (unknown ops, unknown or bad parameters, an op that cannot take what the
// op before it gives, a pipeline not ending in tensors, a label clash)
// comes back at once in a *ValidationError, each with its position.
func Build(d Definition, o Options) (Pipeline, error) {
	p, probs := compile(d, o)
	if len(probs) > 0 {
		return nil, &ValidationError{Pipeline: nameOr(d.Name), Problems: probs}
	}
	return p, nil
}

// compile checks d and builds its stages; it returns a pipeline only when
// there are no problems.
func compile(d Definition, o Options) (*compiled, []Problem) {
	var probs []Problem
	if len(d.Ops) == 0 {
		probs = append(probs, Problem{Op: -1, Msg: "ops: want at least one op"})
	}
	c := &compiled{name: nameOr(d.Name), label: d.Label, maxPixels: o.MaxPixels, budget: o.DecodeBudget}
	prev, prevOK := TypeSample, true // prevOK: prev is known (the op before was recognised)
	lastImage := -1                  // the op that made the current encoded_image
	var outputs []string             // field names the terminal op makes
	for i, call := range d.Ops {
		add := func(line int, format string, args ...any) {
			if line == 0 {
				line = call.line
			}
			probs = append(probs, Problem{Line: line, Op: i, OpName: call.Op, Msg: fmt.Sprintf(format, args...)})
		}
		spec, ok := LookupOp(call.Op)
		if !ok {
			if call.Op != "" { // an empty name was reported while parsing
				add(0, "unknown op %q%s", call.Op, suggest(call.Op))
			}
			prevOK = false
			continue
		}
		if prevOK && !spec.Accepts(prev) {
			from := "the pipeline's input is a " + string(prev)
			if i > 0 {
				from = fmt.Sprintf("ops[%d] (%s) gives %s", i-1, d.Ops[i-1].Op, prev)
			}
			add(0, "takes %s, but %s%s", joinTypes(spec.In), from, bridge(prev, spec))
		}
		params, bad := resolveParams(spec, call, add)
		out := spec.Output(params)
		if out == TypeEncodedImage {
			lastImage = i
		}
		if !bad {
			bo := o
			bo.prev, bo.prevBuilt = nil, len(c.stages) == i // every op before this one built
			if bo.prevBuilt && i > 0 {
				bo.prev = c.stages[i-1]
			}
			st, err := spec.build(params, bo)
			if err != nil {
				add(0, "%v", err)
			} else {
				if ps, ok := st.(*packStage); ok {
					c.pack = &ps.o
				}
				c.stages = append(c.stages, st)
				c.ops = append(c.ops, call.Op)
				c.decodeOwner = append(c.decodeOwner, lastImage)
			}
		}
		if out.Terminal() {
			outputs = terminalFields(out)
		}
		prev, prevOK = out, true
	}
	if n := len(d.Ops); n > 0 && prevOK && !prev.Terminal() {
		probs = append(probs, Problem{Line: d.Ops[n-1].line, Op: n - 1, OpName: d.Ops[n-1].Op,
			Msg: fmt.Sprintf("the pipeline ends with %s, which is not a tensor: end it with %s", prev, finishers(prev))})
	}
	if !d.Label.None() && prevOK && prev == TypePacked {
		probs = append(probs, Problem{Line: d.labelLine, Op: -1,
			Msg: "label: pack makes rows of many documents, which have no one label; set label: none"})
	} else if !d.Label.None() && slices.Contains(outputs, "label") {
		probs = append(probs, Problem{Line: d.labelLine, Op: -1,
			Msg: "label: the pipeline's ops already output a label field; set label: none"})
	}
	if len(probs) > 0 {
		return nil, probs
	}
	c.fieldCap = len(outputs) + 1
	c.states.New = func() any { return newState() }
	return c, nil
}

// resolveParams converts the call's parameters and fills in defaults,
// reporting unknown and bad ones; bad is true when any was reported. A bad
// parameter takes its default, so the op's output type is still known.
func resolveParams(spec OpSpec, call OpCall, add func(line int, format string, args ...any)) (Params, bool) {
	params := Params{}
	bad := false
	for _, p := range spec.Params {
		params[p.Name] = p.Default
	}
	names := make([]string, 0, len(call.Params))
	for name := range call.Params {
		names = append(names, name)
	}
	// In the spec's order when it came from a document, else by name.
	slices.SortFunc(names, func(a, b string) int {
		if la, lb := call.paramLines[a], call.paramLines[b]; la != lb {
			return la - lb
		}
		return strings.Compare(a, b)
	})
	for _, name := range names {
		raw := call.Params[name]
		line := call.paramLines[name]
		p, ok := spec.Param(name)
		if !ok {
			bad = true
			if len(spec.Params) == 0 {
				add(line, "unknown parameter %q: %s takes none", name, spec.Name)
			} else {
				add(line, "unknown parameter %q: %s takes %s", name, spec.Name, paramNames(spec))
			}
			continue
		}
		v, err := p.convert(raw)
		if err != nil {
			bad = true
			add(line, "%s %s: %v", name, formatValue(raw), err)
			continue
		}
		params[name] = v
	}
	for _, p := range spec.Params {
		if _, set := call.Params[p.Name]; p.Required && !set {
			bad = true
			add(0, "missing parameter %s: %s", p.Name, p.Doc)
		}
	}
	return params, bad
}

func paramNames(s OpSpec) string {
	var n []string
	for _, p := range s.Params {
		n = append(n, p.Name)
	}
	return strings.Join(n, ", ")
}

func joinTypes(ts []Type) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, " or ")
}

// bridge suggests an op that turns have into something spec takes.
func bridge(have Type, spec OpSpec) string {
	if have == TypeTokens && spec.Accepts(TypeIDs) {
		return " (give the bpe op mode: ids)"
	}
	for _, o := range Ops() {
		if o.Accepts(have) && spec.Accepts(o.Output(defaults(o))) {
			return fmt.Sprintf(" (put %s before it)", o.Name)
		}
	}
	return ""
}

// finishers names the ops that turn t into tensors.
func finishers(t Type) string {
	var names []string
	for _, o := range Ops() {
		if o.Accepts(t) && o.Output(defaults(o)).Terminal() {
			names = append(names, o.Name)
		}
	}
	if len(names) == 0 {
		return "an op that outputs tensors"
	}
	return strings.Join(names, " or ")
}

func defaults(s OpSpec) Params {
	p := Params{}
	for _, pr := range s.Params {
		p[pr.Name] = pr.Default
	}
	return p
}

// terminalFields names the fields a terminal type becomes.
func terminalFields(t Type) []string {
	switch t {
	case TypeTensorU8HWC, TypeTensorF32CHW, TypeTensorF16CHW:
		return []string{"image"}
	case TypeTokens:
		return []string{"input_ids", "attention_mask", "segment_ids"}
	case TypeTabular:
		return []string{"label", "dense", "sparse"}
	case TypePacked:
		return []string{FieldInputIDs, FieldPositionIDs, FieldCuSeqlens, FieldNumSeqs, FieldAttnMask}
	}
	return nil
}

// suggest offers the nearest op name for a misspelt one.
func suggest(name string) string {
	best, bestD := "", 3
	var all []string
	for _, o := range Ops() {
		all = append(all, o.Name)
		if d := names.EditDistance(name, o.Name); d < bestD {
			best, bestD = o.Name, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return ": known ops are " + strings.Join(all, ", ")
}
