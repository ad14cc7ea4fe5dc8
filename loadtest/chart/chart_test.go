package chart

import (
	"encoding/xml"
	"math"
	"strings"
	"testing"
)

func TestWriteStepsIsWellFormedSVG(t *testing.T) {
	var b strings.Builder
	err := WriteSteps(&b, "replicas <over> time", "s", "replicas", []Series{
		{Name: "sluice", Points: [][2]float64{{0, 0}, {1, 3}, {2.5, 2}}},
		{Name: "keda & co", Points: [][2]float64{{0, 0}, {30, 4}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(b.String()))
	paths := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed: %v\n%s", err, b.String())
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	if paths != 2 || !strings.Contains(b.String(), "keda &amp; co") {
		t.Errorf("%d paths, want 2, and escaped names:\n%s", paths, b.String())
	}
	if niceCeil(31) != 50 || niceCeil(4) != 5 || niceCeil(10) != 10 {
		t.Errorf("niceCeil: 31 -> %v, 4 -> %v, 10 -> %v", niceCeil(31), niceCeil(4), niceCeil(10))
	}
}

func TestWritePointsMarksEveryPointAndJoinsCurves(t *testing.T) {
	var b strings.Builder
	err := WritePoints(&b, "stall against cost", "core-h", "GPU-h", []Series{
		{Name: "static", Points: [][2]float64{{1, 9}, {2, 4}, {4, 1}}},
		{Name: "sluice", Points: [][2]float64{{1.5, 0.5}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if n := strings.Count(svg, "<circle"); n != 4 {
		t.Errorf("%d markers, want 4:\n%s", n, svg)
	}
	if n := strings.Count(svg, "<path"); n != 1 {
		t.Errorf("%d lines, want 1 (the curve of three points):\n%s", n, svg)
	}
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Errorf("not well-formed: %v", err)
	}
}

func TestLogAxisSpansThePowersOfTenAroundTheValues(t *testing.T) {
	a := newAxis([]Series{{Points: [][2]float64{{0.63, 0}, {7558, 0}}}}, 0, true)
	if a.lo != 0.1 || a.hi != 10000 {
		t.Fatalf("axis %+v, want 0.1..10000", a)
	}
	if got := len(a.ticks()); got != 6 {
		t.Errorf("%d ticks, want 6 (0.1 to 10000)", got)
	}
	if a.at(0.1) != 0 || a.at(10000) != 1 || math.Abs(a.at(10)-0.4) > 1e-9 || a.at(0) != 0 {
		t.Errorf("at: 0.1 -> %v, 10000 -> %v, 10 -> %v, 0 -> %v", a.at(0.1), a.at(10000), a.at(10), a.at(0))
	}
}
