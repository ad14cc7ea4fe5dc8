// Package safeyaml parses YAML (and so JSON) documents that come from
// outside the process (pipeline specs in shard tasks, job and sweep files)
// without letting a small document take memory out of proportion to its
// size. It refuses two things before anything is decoded:
//
//   - a document over the caller's size limit (*SizeError), and
//   - aliases (*name, and merge keys <<: *name) (*AliasError): a decoder
//     expands each alias into a copy of what it names, so ten levels of
//     ten-fold aliases in a few hundred bytes become ten billion nodes (a
//     403-byte pipeline spec took 465 MB to read). No Sluice document needs
//     them; anchors without aliases are harmless and allowed.
//
// Parsing into a node tree does not expand aliases, so Parse costs memory
// in proportion to the document.
package safeyaml

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/internal/bytesize"
)

// SizeError is a document over its size limit.
type SizeError struct {
	// What names the document ("pipeline spec", "job spec").
	What        string
	Size, Limit int64
}

func (e *SizeError) Error() string {
	size, limit := bytesize.Format(e.Size), bytesize.Format(e.Limit)
	if size == limit { // just over: rounded, the two would read the same
		size, limit = fmt.Sprintf("%d bytes", e.Size), fmt.Sprintf("%d-byte", e.Limit)
	}
	return fmt.Sprintf("%s is %s, over the %s limit", e.What, size, limit)
}

// AliasError is an alias in a document.
type AliasError struct {
	// Line is the alias's 1-based line; 0 when unknown.
	Line int
}

func (e *AliasError) Error() string {
	if e.Line == 0 {
		return "yaml aliases are not allowed"
	}
	return fmt.Sprintf("yaml aliases are not allowed (line %d)", e.Line)
}

// CheckSize returns a *SizeError when size is over limit.
func CheckSize(what string, size int64, limit int) error {
	if size > int64(limit) {
		return &SizeError{What: what, Size: size, Limit: int64(limit)}
	}
	return nil
}

// Parse parses doc into its node tree after checking its size against
// limit (what names it in the *SizeError), and refuses a document with an
// alias (*AliasError). A syntax error is yaml's own, unwrapped, so callers
// can read its line.
func Parse(what string, doc []byte, limit int) (yaml.Node, error) {
	var root yaml.Node
	if err := CheckSize(what, int64(len(doc)), limit); err != nil {
		return root, err
	}
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return yaml.Node{}, err
	}
	if err := NoAliases(&root); err != nil {
		return yaml.Node{}, err
	}
	return root, nil
}

// DecodeStrict decodes doc into v as yaml.Decoder with KnownFields does
// (a key v has no field for is an error), after Parse's checks.
func DecodeStrict(what string, doc []byte, limit int, v any) error {
	if _, err := Parse(what, doc, limit); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// NoAliases returns an *AliasError for the first alias in the tree under
// n. It follows Content only, never an alias's target, so it visits each
// node of the document once.
func NoAliases(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		return &AliasError{Line: n.Line}
	}
	for _, c := range n.Content {
		if err := NoAliases(c); err != nil {
			return err
		}
	}
	return nil
}
