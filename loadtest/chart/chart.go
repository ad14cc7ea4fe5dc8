// Package chart draws the load tests' charts as standalone SVG documents.
package chart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	Points [][2]float64 // (x, y)
}

// palette tells up to eight lines apart, colour-blind safe (Okabe-Ito).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"}

// WriteSteps draws series as step lines (a count holds until the next
// sample) on shared axes, with a legend.
func WriteSteps(w io.Writer, title, xLabel, yLabel string, series []Series) error {
	return write(w, title, xLabel, yLabel, series, func(b *strings.Builder, s Series, c string, x, y func(float64) float64) {
		var d strings.Builder
		for j, p := range s.Points {
			if j == 0 {
				fmt.Fprintf(&d, "M%.1f %.1f", x(p[0]), y(p[1]))
				continue
			}
			fmt.Fprintf(&d, " H%.1f V%.1f", x(p[0]), y(p[1]))
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n", d.String(), c)
	})
}

// WritePoints draws each series as markers joined by straight lines (a
// series of one point is a marker: one run; of several, a curve over a
// knob), with a legend.
func WritePoints(w io.Writer, title, xLabel, yLabel string, series []Series) error {
	return write(w, title, xLabel, yLabel, series, func(b *strings.Builder, s Series, c string, x, y func(float64) float64) {
		if len(s.Points) > 1 {
			var d strings.Builder
			for j, p := range s.Points {
				fmt.Fprintf(&d, "%s%.1f %.1f ", map[bool]string{true: "M", false: "L"}[j == 0], x(p[0]), y(p[1]))
			}
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.TrimSpace(d.String()), c)
		}
		for _, p := range s.Points {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", x(p[0]), y(p[1]), c)
		}
	})
}

// write draws the frame, the axes and the legend, and each series with draw.
func write(w io.Writer, title, xLabel, yLabel string, series []Series,
	draw func(b *strings.Builder, s Series, colour string, x, y func(float64) float64)) error {
	const width, height = 800, 360
	const left, right, top, bottom = 60, 230, 36, 44
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	var xMax, yMax float64
	for _, s := range series {
		for _, p := range s.Points {
			xMax, yMax = max(xMax, p[0]), max(yMax, p[1])
		}
	}
	xMax, yMax = niceCeil(max(xMax, 1)), niceCeil(max(yMax, 1))
	x := func(v float64) float64 { return float64(left) + v/xMax*pw }
	y := func(v float64) float64 { return float64(top) + ph - v/yMax*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i := 0; i <= 5; i++ { // grid and ticks
		yv, xv := yMax*float64(i)/5, xMax*float64(i)/5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, float64(left)+pw, y(yv), y(yv))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(yv)+4, tick(yv))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(xv), float64(top)+ph+16, tick(xv))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(left)+pw/2, height-8, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(top)+ph/2, html.EscapeString(yLabel))
	for i, s := range series {
		c := palette[i%len(palette)]
		draw(&b, s, c, x, y)
		ly := top + 10 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", width-right+12, width-right+32, ly, ly, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", width-right+38, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
