package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/safeyaml"
	"github.com/sluice-project/sluice/internal/suggest"
	"github.com/sluice-project/sluice/wire"
)

// Parse reads a job spec file and checks it, returning every
// problem at once as a *Error, each at its line. The file is YAML (so
// JSON too); its keys are the JSON names of wire.JobSpec:
//
//	id: resnet-01
//	dataset: s3://datasets/imagenet/train/
//	pipeline: imagenet-train     # a built-in name, or a pipeline spec inline:
//	# pipeline:
//	#   name: flowers
//	#   label: {member: cls}
//	#   ops: [decode, {op: resize, size: 256}, {op: center_crop, size: 224}, to_uint8_hwc]
//	batch_size: 256
//	epochs: 90
//	seed: 7
//	min_replicas: 0
//	max_replicas: 16
//	initial_replicas: 4          # started at once, before any demand (pre-warm)
//	weight: 2
//	readers: [rank0, rank1]
//	chunk_max_bytes: 1MiB        # sizes: integers or strings with B, KiB, MiB, GiB, TiB, KB, MB, GB, TB
//	output_buffer_bytes: 2GiB
//	columns: {txt: content, cls: fine_label}   # Parquet: member: column (docs/parquet.md)
//
// An inline pipeline is kept as a pipeline spec document, which is what
// the job's Pipeline carries. Fields left out take their defaults at
// Submit; they are checked here with their defaults. A file over
// MaxFileBytes, or with YAML aliases (*name), is refused unread.
func Parse(data []byte) (wire.JobSpec, error) {
	return ParseWith(data, nil)
}

// ParseWith is Parse with override applied to the spec the
// file gives before it is checked, as command-line flags are. A problem of
// a field override changed has no line.
func ParseWith(data []byte, override func(*wire.JobSpec)) (wire.JobSpec, error) {
	f, probs := decodeJobFile(data)
	spec := f.spec
	if override != nil {
		override(&spec)
		for _, k := range changedFields(f.spec, spec) {
			f.overridden[k] = true
		}
	}
	if f.ok {
		probs = append(probs, f.place(specProblems(spec.WithDefaults()))...)
	}
	if len(probs) > 0 {
		// In the file's order; those at no line (keys left out, values
		// from flags) after them.
		slices.SortStableFunc(probs, func(a, b Problem) int {
			return lineOrder(a.Line) - lineOrder(b.Line)
		})
		return spec, &Error{Job: spec.ID, Problems: probs}
	}
	return spec, nil
}

func lineOrder(line int) int {
	if line == 0 {
		return math.MaxInt32
	}
	return line
}

// jobFile is a decoded job spec file: the spec and where each key is.
type jobFile struct {
	spec wire.JobSpec
	// ok means the document was a mapping, so its fields can be checked.
	ok    bool
	lines map[string]int
	// overridden are the keys whose value came from elsewhere (flags).
	overridden map[string]bool
	// unread are the keys whose value could not be decoded (and so is
	// left zero): their problem is said already.
	unread map[string]bool
	// readerLines are the lines of the readers' entries.
	readerLines []int
	// pipelineOffset is added to a line of the pipeline document to get
	// the file's; -1 means the document's lines are not the file's.
	pipelineOffset int
}

// jobKeys are the keys of a job spec file, in wire.JobSpec's order (the
// mixing keys, added later, last).
var jobKeys = []string{"id", "dataset", "pipeline", "batch_size", "epochs", "seed", "min_replicas",
	"max_replicas", "initial_replicas", "weight", "readers", "chunk_max_bytes", "output_buffer_bytes",
	"sources", "epoch_shards", "columns"}

func decodeJobFile(data []byte) (jobFile, []Problem) {
	f := jobFile{lines: map[string]int{}, overridden: map[string]bool{}, unread: map[string]bool{}, pipelineOffset: -1}
	if len(bytes.TrimSpace(data)) == 0 {
		return f, []Problem{{Message: "empty job spec"}}
	}
	root, prob := parseYAML(data)
	if prob != nil {
		return f, []Problem{*prob}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return f, []Problem{{Message: "empty job spec"}}
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return f, []Problem{{Line: top.Line, Message: "want a mapping of " + strings.Join(jobKeys, ", ")}}
	}
	f.ok = true
	var probs []Problem
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if prev, ok := f.lines[k.Value]; ok {
			probs = append(probs, Problem{Line: k.Line, Field: k.Value, Message: fmt.Sprintf("set twice (first on line %d)", prev)})
			continue
		}
		if !slices.Contains(jobKeys, k.Value) {
			probs = append(probs, Problem{Line: k.Line, Message: unknownKey(k.Value)})
			continue
		}
		f.lines[k.Value] = k.Line
		if err := f.decodeField(data, top, i, k.Value, v); err != nil {
			probs = append(probs, Problem{Line: v.Line, Field: k.Value, Message: err.Error()})
			f.unread[k.Value] = true
		}
	}
	return f, probs
}

// MaxFileBytes caps a job or sweep file. One is a few KB; a sweep's
// trials may each carry a pipeline spec (at most pipeline.MaxSpecBytes).
const MaxFileBytes = 1 << 20

// parseYAML parses a spec file, refusing one over MaxFileBytes and
// YAML aliases (safeyaml). A JSON one gets JSON's syntax errors, clearer
// than YAML's; one YAML cannot read (indented with tabs) is read
// compacted, without lines.
func parseYAML(data []byte) (yaml.Node, *Problem) {
	var root yaml.Node
	if err := safeyaml.CheckSize("job spec", int64(len(data)), MaxFileBytes); err != nil {
		return root, &Problem{Message: err.Error()}
	}
	trimmed := bytes.TrimSpace(data)
	if trimmed[0] == '{' {
		if err := json.Unmarshal(trimmed, new(any)); err != nil {
			p := Problem{Message: "not valid JSON: " + err.Error()}
			var se *json.SyntaxError
			if errors.As(err, &se) {
				p.Line = 1 + bytes.Count(trimmed[:min(int(se.Offset), len(trimmed))], []byte("\n"))
				p.Line += bytes.Count(data[:bytes.Index(data, trimmed)], []byte("\n"))
			}
			return root, &p
		}
		var err error
		if root, err = safeyaml.Parse("job spec", data, MaxFileBytes); err != nil {
			var c bytes.Buffer
			_ = json.Compact(&c, trimmed)
			if root, err = safeyaml.Parse("job spec", c.Bytes(), MaxFileBytes); err != nil {
				p := syntaxProblem(err)
				return root, &p
			}
			clearLines(&root)
		}
		return root, nil
	}
	root, err := safeyaml.Parse("job spec", data, MaxFileBytes)
	if err != nil {
		p := syntaxProblem(err)
		return root, &p
	}
	return root, nil
}

func clearLines(n *yaml.Node) {
	n.Line = 0
	for _, c := range n.Content {
		clearLines(c)
	}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func syntaxProblem(err error) Problem {
	var ae *safeyaml.AliasError
	if errors.As(err, &ae) {
		return Problem{Line: ae.Line, Message: (&safeyaml.AliasError{}).Error()}
	}
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{Line: line, Message: "not valid YAML: " + msg[len(m[0]):]}
	}
	return Problem{Message: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

func unknownKey(key string) string {
	best, dist := "", 3 // suggest only a near miss
	for _, k := range jobKeys {
		if d := suggest.EditDistance(strings.ToLower(strings.ReplaceAll(key, "-", "_")), k); d < dist {
			best, dist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q: did you mean %q?", key, best)
	}
	return fmt.Sprintf("unknown key %q: a job spec has %s", key, strings.Join(jobKeys, ", "))
}

// decodeField sets key's field from v, the value of top.Content[i].
func (f *jobFile) decodeField(data []byte, top *yaml.Node, i int, key string, v *yaml.Node) error {
	s := &f.spec
	switch key {
	case "id":
		return decodeString(v, &s.ID)
	case "dataset":
		return decodeString(v, &s.Dataset)
	case "sources":
		return f.decodeSources(v)
	case "epoch_shards":
		return decodeInt(v, &s.EpochShards)
	case "pipeline":
		return f.decodePipeline(data, top, i, v)
	case "batch_size":
		return decodeInt(v, &s.BatchSize)
	case "epochs":
		return decodeInt(v, &s.Epochs)
	case "seed":
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&s.Seed) != nil {
			return fmt.Errorf("%s: want an integer 0..%d", describe(v), uint64(math.MaxUint64))
		}
	case "min_replicas":
		return decodeInt(v, &s.MinReplicas)
	case "max_replicas":
		return decodeInt(v, &s.MaxReplicas)
	case "initial_replicas":
		return decodeInt(v, &s.InitialReplicas)
	case "weight":
		if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || v.Decode(&s.Weight) != nil {
			return fmt.Errorf("%s: want a number", describe(v))
		}
	case "readers":
		if v.Kind != yaml.SequenceNode {
			return fmt.Errorf("%s: want a list of reader names", describe(v))
		}
		for j, r := range v.Content {
			var name string
			if err := decodeString(r, &name); err != nil {
				return fmt.Errorf("[%d] %w", j, err)
			}
			s.Readers = append(s.Readers, name)
			f.readerLines = append(f.readerLines, r.Line)
		}
	case "chunk_max_bytes":
		n, err := decodeSize(v)
		if err == nil && n > math.MaxInt32 {
			err = fmt.Errorf("%d: want at most %d", n, math.MaxInt32)
		}
		s.ChunkMaxBytes = int(n)
		return err
	case "output_buffer_bytes":
		n, err := decodeSize(v)
		s.OutputBufferBytes = n
		return err
	case "columns":
		if v.Kind != yaml.MappingNode {
			return fmt.Errorf("%s: want a mapping of sample members to column names", describe(v))
		}
		s.Columns = map[string]string{}
		for j := 0; j+1 < len(v.Content); j += 2 {
			var m, c string
			if err := decodeString(v.Content[j], &m); err != nil {
				return err
			}
			if err := decodeString(v.Content[j+1], &c); err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			s.Columns[m] = c
		}
	}
	return nil
}

func describe(v *yaml.Node) string {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!str" {
			return strconv.Quote(v.Value)
		}
		return v.Value
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "this value"
}

func decodeString(v *yaml.Node, dst *string) error {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return fmt.Errorf("%s: want a string", describe(v))
	}
	*dst = v.Value
	return nil
}

func decodeInt(v *yaml.Node, dst *int) error {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(dst) != nil {
		return fmt.Errorf("%s: want an integer", describe(v))
	}
	return nil
}

// decodeSize reads a byte count: an integer or a bytesize.Parse string.
func decodeSize(v *yaml.Node) (int64, error) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!str") {
		return 0, fmt.Errorf("%s: %s", describe(v), bytesize.Want)
	}
	n, err := bytesize.Parse(v.Value)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", describe(v), err)
	}
	return n, nil
}

// sourceKeys are the keys of a source (wire.SourceSpec).
var sourceKeys = []string{"dataset", "weight", "pipeline", "repeat", "choose"}

// decodeSources reads the list of a mixed job's sources, noting each
// field's line (as sources[i].key) for its problems.
func (f *jobFile) decodeSources(v *yaml.Node) error {
	if v.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: want a list of sources (dataset, weight, and optionally pipeline, repeat or choose)", describe(v))
	}
	if len(v.Content) > wire.MaxSources {
		return fmt.Errorf("%d sources: want at most %d", len(v.Content), wire.MaxSources)
	}
	f.spec.Sources = []wire.SourceSpec{}
	for j, item := range v.Content {
		if item.Kind != yaml.MappingNode {
			return fmt.Errorf("[%d] %s: want a mapping of %s", j, describe(item), strings.Join(sourceKeys, ", "))
		}
		var src wire.SourceSpec
		for k := 0; k+1 < len(item.Content); k += 2 {
			key, val := item.Content[k].Value, item.Content[k+1]
			f.lines[fmt.Sprintf("sources[%d].%s", j, key)] = item.Content[k].Line
			var err error
			switch key {
			case "dataset":
				err = decodeString(val, &src.Dataset)
			case "pipeline":
				src.Pipeline, err = pipelineValue(val)
			case "weight":
				err = decodeNumber(val, &src.Weight)
			case "repeat":
				err = decodeNumber(val, &src.Repeat)
			case "choose":
				err = decodeInt(val, &src.Choose)
			default:
				err = fmt.Errorf("unknown key %q: a source has %s", key, strings.Join(sourceKeys, ", "))
			}
			if err != nil {
				return fmt.Errorf("[%d] %s: %w", j, key, err)
			}
		}
		f.spec.Sources = append(f.spec.Sources, src)
	}
	return nil
}

// pipelineValue is a source's pipeline: a name or document as a string,
// or an inline spec, re-encoded as JSON.
func pipelineValue(v *yaml.Node) (string, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
		return v.Value, nil
	case v.Kind == yaml.MappingNode:
		var x any
		if err := v.Decode(&x); err != nil {
			return "", fmt.Errorf("decoding the inline pipeline spec: %w", err)
		}
		doc, err := json.Marshal(x)
		return string(doc), err
	}
	return "", fmt.Errorf("%s: want a built-in pipeline name or a pipeline spec", describe(v))
}

func decodeNumber(v *yaml.Node, dst *float64) error {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || v.Decode(dst) != nil {
		return fmt.Errorf("%s: want a number", describe(v))
	}
	return nil
}

// decodePipeline takes a built-in name or a document as a string, or an
// inline pipeline spec, kept as the document the functions parse.
func (f *jobFile) decodePipeline(data []byte, top *yaml.Node, i int, v *yaml.Node) error {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag != "!!str" {
			return fmt.Errorf("%s: want a built-in pipeline name or a pipeline spec", describe(v))
		}
		f.spec.Pipeline = v.Value
		if v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			f.pipelineOffset = v.Line // the document starts on the next line
		}
		return nil
	case yaml.MappingNode:
	default:
		return fmt.Errorf("%s: want a built-in pipeline name or a pipeline spec (a mapping)", describe(v))
	}
	if v.Style&yaml.FlowStyle == 0 {
		end := 0 // the line before the next key; 0: the end of the file
		if i+2 < len(top.Content) {
			end = top.Content[i+2].Line - 1
		}
		if doc, ok := blockText(data, v.Line, end, v.Column); ok {
			f.spec.Pipeline = doc
			f.pipelineOffset = v.Line - 1
			return nil
		}
	}
	// A flow mapping (JSON) ends mid-line: re-encoded, its lines are lost.
	var x any
	if err := v.Decode(&x); err != nil {
		return fmt.Errorf("decoding the inline pipeline spec: %w", err)
	}
	doc, err := json.Marshal(x)
	if err != nil {
		return fmt.Errorf("re-encoding the inline pipeline spec: %w", err)
	}
	f.spec.Pipeline = string(doc)
	return nil
}

// blockText is the block mapping on lines first..last (1-based; last 0
// means the end) of data, indented by column-1, as a document of its own,
// trailing blank lines left out. ok is false if it does not read back as a
// YAML mapping.
func blockText(data []byte, first, last, column int) (string, bool) {
	lines := strings.Split(string(data), "\n")
	if last == 0 || last > len(lines) {
		last = len(lines)
	}
	if first < 1 || first > last {
		return "", false
	}
	var b strings.Builder
	for _, l := range lines[first-1 : last] {
		l = strings.TrimSuffix(l, "\r")
		n := 0
		for n < len(l) && n < column-1 && l[n] == ' ' {
			n++
		}
		b.WriteString(l[n:])
		b.WriteString("\n")
	}
	doc := strings.TrimRight(b.String(), " \n") + "\n"
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &n); err != nil || len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
		return "", false
	}
	return doc, true
}

// place puts each problem of the spec at the line of its key, or of the
// reader or pipeline document line it is about.
func (f *jobFile) place(probs []Problem) []Problem {
	out := make([]Problem, 0, len(probs))
	for _, p := range probs {
		if f.unread[p.Field] && !f.overridden[p.Field] {
			continue
		}
		line, set := f.lines[p.Field]
		switch {
		case f.overridden[p.Field]: // not the file's value: no line
		case !set && p.Field != "" && p.docLine == 0:
			p.Message = "not set (" + p.Message + ")"
		case p.Field == "pipeline" && p.docLine > 0 && set:
			p.Line, p.Message = line, p.bare
			if f.pipelineOffset >= 0 {
				p.Line = f.pipelineOffset + p.docLine
			}
		case set:
			p.Line = line
			if j, ok := readerIndex(p); ok && j < len(f.readerLines) {
				p.Line = f.readerLines[j]
			}
		}
		out = append(out, p)
	}
	return out
}

var readerIndexPattern = regexp.MustCompile(`^\[(\d+)\] `)

// readerIndex is the index of the reader a readers problem is about.
func readerIndex(p Problem) (int, bool) {
	if p.Field != "readers" {
		return 0, false
	}
	m := readerIndexPattern.FindStringSubmatch(p.Message)
	if m == nil {
		return 0, false
	}
	j, err := strconv.Atoi(m[1])
	return j, err == nil
}

// changedFields are the JSON names of the fields that differ between a
// and b.
func changedFields(a, b wire.JobSpec) []string {
	fields := func(s wire.JobSpec) map[string]json.RawMessage {
		data, _ := json.Marshal(s)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(data, &m)
		return m
	}
	ma, mb := fields(a), fields(b)
	var out []string
	for _, k := range jobKeys {
		if !bytes.Equal(ma[k], mb[k]) {
			out = append(out, k)
		}
	}
	return out
}
