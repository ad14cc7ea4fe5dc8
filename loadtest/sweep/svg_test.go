package sweep

import (
	"encoding/xml"
	"strings"
	"testing"
)

func TestWriteChartIsWellFormedSVG(t *testing.T) {
	var b strings.Builder
	err := WriteChart(&b, "replicas <over> time", "s", "replicas", []Series{
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
