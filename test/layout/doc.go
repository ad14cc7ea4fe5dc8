// Package layout holds tests of the tree's import rules: what may import
// what, so that the layout keeps showing the architecture.
package layout
