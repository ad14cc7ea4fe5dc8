package pipeline

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/hostile"
	"github.com/sluice-project/sluice/internal/safeyaml"
)

// A 400-byte spec whose aliases expand to ten million scalars once took
// 465 MB to parse: it is refused before anything is expanded.
func TestSpecWithAliasesIsRefusedWithoutExpandingThem(t *testing.T) {
	doc := []byte(hostile.PipelineSpecBomb(7))
	for name, parse := range map[string]func() error{
		"ParseDefinition": func() error { _, err := ParseDefinition(doc); return err },
		"Parse":           func() error { _, err := Parse(doc, Options{}); return err },
		"Lookup":          func() error { _, err := Lookup(string(doc), Options{}); return err },
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := parse()
		runtime.ReadMemStats(&after)
		var ae *safeyaml.AliasError
		if !errors.As(err, &ae) || err.Error() != "pipeline spec: yaml aliases are not allowed (line 5)" {
			t.Errorf("%s(bomb) = %v, want pipeline spec: yaml aliases are not allowed (line 5)", name, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("%s: refusing a %d-byte bomb allocated %d bytes, want well under 1 MiB", name, len(doc), got)
		}
	}
}

func TestSpecOverTheSizeLimitIsRefusedUnread(t *testing.T) {
	for _, doc := range []string{
		"name: big\ndoc: " + strings.Repeat("y", 2*MaxSpecBytes) + "\nops: [decode, to_uint8_hwc]\n",
		`{"name": "big", "doc": "` + strings.Repeat("y", 2_200_000) + `", "ops": ["decode", "to_uint8_hwc"]}`,
	} {
		_, err := Parse([]byte(doc), Options{})
		var se *safeyaml.SizeError
		if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), "pipeline spec is ") || !strings.HasSuffix(err.Error(), "iB, over the 64.0 KiB limit") {
			t.Errorf("Parse(%d bytes) = %v, want pipeline spec is N, over the 64.0 KiB limit", len(doc), err)
		}
	}
	// At the limit is fine.
	doc := "name: big\nops: [decode, to_uint8_hwc]\ndoc: "
	doc += strings.Repeat("y", MaxSpecBytes-len(doc)-1) + "\n"
	if _, err := Parse([]byte(doc), Options{}); err != nil {
		t.Fatalf("Parse(%d bytes) = %v", len(doc), err)
	}
}
