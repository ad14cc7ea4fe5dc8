package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ImageNet recipe constants, as in torchvision's reference training scripts.
const (
	CropSize   = 224
	EvalResize = 256
	FlipProb   = 0.5
)

// Builtins lists the pipelines a job can name instead of giving a spec,
// sorted by name. They are definitions like any spec document's, so they
// go through the same validation and ops.
func Builtins() []Definition {
	cls := Label{Member: "cls"}
	d := []Definition{
		{
			Name:  "imagenet-train",
			Doc:   `RandomResizedCrop 224 + random flip: "image" U8 [224,224,3], "label" I64 []`,
			Label: cls,
			Ops: []OpCall{
				{Op: "decode"},
				{Op: "random_resized_crop", Params: map[string]any{"size": CropSize}},
				{Op: "random_horizontal_flip", Params: map[string]any{"p": FlipProb}},
				{Op: "to_uint8_hwc"},
			},
		},
		{
			Name:  "imagenet-eval",
			Doc:   `resize shorter side 256 + center crop 224: "image" U8 [224,224,3], "label" I64 []`,
			Label: cls,
			Ops: []OpCall{
				{Op: "decode"},
				{Op: "resize", Params: map[string]any{"size": EvalResize}},
				{Op: "center_crop", Params: map[string]any{"size": CropSize}},
				{Op: "to_uint8_hwc"},
			},
		},
	}
	d = append(d, textBuiltins()...)
	d = append(d, tabularBuiltins()...)
	slices.SortFunc(d, func(a, b Definition) int { return strings.Compare(a.Name, b.Name) })
	return d
}

// Names lists the built-in pipeline names, sorted.
func Names() []string {
	var names []string
	for _, d := range Builtins() {
		names = append(names, d.Name)
	}
	return names
}

// Lookup builds the pipeline a job names: a built-in name, or a whole
// spec document passed as the string (JSON when it starts with '{', else
// YAML; a string with a colon or a line break is taken for a document,
// since no built-in name has either). It never takes the string for a file name (that
// is LoadFile, for the CLI): a job's pipeline string must not make a
// replica read specs from its disk.
func Lookup(name string, o Options) (Pipeline, error) {
	for _, d := range Builtins() {
		if d.Name == name {
			return Build(d, o)
		}
	}
	if strings.ContainsAny(name, ":\n{") {
		p, err := Parse([]byte(name), o)
		if !errors.Is(err, errNotDocument) {
			return p, err
		}
	}
	return nil, fmt.Errorf("unknown pipeline %q: known pipelines are %s (or give a YAML or JSON spec)", name, strings.Join(Names(), ", "))
}

// CheckOnly is the Options of a process that is not a replica, such as job
// submit: what it builds validates names and parameters but reads no file
// a spec names (those are the replica's, within its --vocab-dir), and
// cannot process samples.
func CheckOnly() Options { return Options{check: true} }

// Check is Lookup for a process that is not a replica, such as job
// submit: it reports the same problems but reads no file a spec names (a
// vocab file is the replica's, within its --vocab-dir), so only the
// name's form is checked.
func Check(nameOrDoc string) error {
	_, err := Lookup(nameOrDoc, Options{check: true})
	return err
}
