package sweep

import "testing"

func TestParseCaseReadsNamesBack(t *testing.T) {
	for _, r := range []Case{
		{Policy: "sluice"}, {Policy: "keda"}, {Policy: "kpa"}, {Policy: "static", Static: 4},
		{Policy: "sluice", Independent: true, Trials: 10, Seeds: 1}, {Policy: "static", Static: 2, Trials: 4, Seeds: 2},
		{Policy: "sluice", NoShed: true, Trials: 4, Seeds: 1}, {Policy: "kpa", Independent: true, NoShed: true},
	} {
		got, err := ParseCase(r.Name())
		if err != nil || got != r {
			t.Errorf("ParseCase(%q) = %+v, %v; want %+v", r.Name(), got, err, r)
		}
	}
}

func TestParseCaseRefusesMalformedNames(t *testing.T) {
	for _, s := range []string{"", "fast", "static:0", "static:x", "sluice@3x4", "sluice@x"} {
		if _, err := ParseCase(s); err == nil {
			t.Errorf("ParseCase(%q): no error", s)
		}
	}
}
