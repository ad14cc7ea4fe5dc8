package safeyaml

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Bomb is a document whose aliases expand ten-fold per level: levels
// levels name 10^levels scalars in a few hundred bytes.
func Bomb(levels int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	fmt.Fprintf(&b, "top: *a%d\n", levels-1)
	return b.String()
}

func TestParseRefusesAliasesWithoutExpandingThem(t *testing.T) {
	doc := []byte(Bomb(9)) // 10^9 scalars when expanded
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Parse("spec", doc, 64<<10)
	runtime.ReadMemStats(&after)
	var ae *AliasError
	if !errors.As(err, &ae) || ae.Line != 2 || err.Error() != "yaml aliases are not allowed (line 2)" {
		t.Fatalf("Parse(bomb) = %v, want an *AliasError at line 2", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("refusing a %d-byte bomb allocated %d bytes, want well under 1 MiB", len(doc), got)
	}
}

func TestParseRefusesMergeKeys(t *testing.T) {
	_, err := Parse("spec", []byte("base: &b {size: 224}\nops:\n  - <<: *b\n    op: resize\n"), 64<<10)
	var ae *AliasError
	if !errors.As(err, &ae) || ae.Line != 3 {
		t.Fatalf("Parse = %v, want an *AliasError at line 3", err)
	}
}

func TestParseAllowsAnchorsAndAliasLookingStrings(t *testing.T) {
	n, err := Parse("spec", []byte("a: &x 1\nb: \"*x\"\nc: '*x'\n"), 64<<10)
	if err != nil || len(n.Content) != 1 {
		t.Fatalf("Parse = %v", err)
	}
}

func TestParseRefusesOversizeDocuments(t *testing.T) {
	doc := []byte("name: x\ndoc: \"" + strings.Repeat("y", 2_200_000) + "\"\n")
	_, err := Parse("pipeline spec", doc, 64<<10)
	var se *SizeError
	if !errors.As(err, &se) || err.Error() != "pipeline spec is 2.1 MiB, over the 64.0 KiB limit" {
		t.Fatalf("Parse = %v, want a *SizeError", err)
	}
	_, err = Parse("pipeline spec", make([]byte, 64<<10+1), 64<<10)
	if err == nil || err.Error() != "pipeline spec is 65537 bytes, over the 65536-byte limit" {
		t.Fatalf("Parse(just over) = %v", err)
	}
}

func TestParseLeavesSyntaxErrorsToYAML(t *testing.T) {
	_, err := Parse("spec", []byte("a: [1, 2\n"), 64<<10)
	if err == nil || !strings.HasPrefix(err.Error(), "yaml: line ") {
		t.Fatalf("Parse = %v, want yaml's syntax error", err)
	}
}

func TestDecodeStrict(t *testing.T) {
	var v struct {
		A int `yaml:"a"`
	}
	if err := DecodeStrict("f", []byte("a: 3\n"), 1024, &v); err != nil || v.A != 3 {
		t.Fatalf("DecodeStrict = %v, %+v", err, v)
	}
	if err := DecodeStrict("f", []byte("a: 3\nb: 4\n"), 1024, &v); err == nil || !strings.Contains(err.Error(), "field b not found") {
		t.Fatalf("DecodeStrict with an unknown key = %v", err)
	}
	var ae *AliasError
	if err := DecodeStrict("f", []byte("x: &x 3\na: *x\n"), 1024, &v); !errors.As(err, &ae) {
		t.Fatalf("DecodeStrict with an alias = %v", err)
	}
}
