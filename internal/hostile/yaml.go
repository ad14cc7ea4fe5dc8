package hostile

import (
	"fmt"
	"strings"
)

// PipelineSpecBomb is a pipeline spec document whose one op has a
// parameter built from aliases that expand ten-fold per level: levels 7
// is about 400 bytes naming ten million scalars. Its aliases are on lines
// 4 and after.
func PipelineSpecBomb(levels int) string {
	var b strings.Builder
	b.WriteString("name: bomb\nops:\n  - op: decode\n    a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "    a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// Indent indents every line of doc by n spaces, to embed a document in
// another as a block.
func Indent(doc string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, l := range strings.SplitAfter(doc, "\n") {
		if l != "" {
			b.WriteString(pad + l)
		}
	}
	return b.String()
}
