package sweep

import (
	"strings"
	"testing"
)

func TestParseCaseReadsNamesBack(t *testing.T) {
	for _, r := range []Case{
		{Policy: "sluice"}, {Policy: "keda"}, {Policy: "kpa"}, {Policy: "static", Static: 4},
		{Policy: "sluice", Independent: true, Trials: 10, Seeds: 1}, {Policy: "static", Static: 2, Trials: 4, Seeds: 2},
	} {
		got, err := ParseCase(r.Name())
		if err != nil || got != r {
			t.Errorf("ParseCase(%q) = %+v, %v; want %+v", r.Name(), got, err, r)
		}
	}
}

func TestParseCaseRefusesWhatIsGone(t *testing.T) {
	// Agents no longer shed a lagging trial: the old run suffix says so.
	for _, s := range []string{"sluice/noshed@4x1", "sluice/independent/noshed", "kpa/noshed"} {
		if _, err := ParseCase(s); err == nil || !strings.Contains(err.Error(), "/noshed is gone") {
			t.Errorf("ParseCase(%q): %v, want an error saying /noshed is gone", s, err)
		}
	}
	for _, s := range []string{"", "fast", "static:0", "static:x", "sluice@3x4", "sluice@x"} {
		if _, err := ParseCase(s); err == nil {
			t.Errorf("ParseCase(%q): no error", s)
		}
	}
}
