// Package chart draws the load tests' charts as standalone SVG documents.
package chart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	Points [][2]float64 // (x, y)
}

// palette tells up to ten lines apart, colour-blind safe (Okabe-Ito, then
// Tol's wine and a grey).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442", "#882255", "#999999"}

// WriteSteps draws series as step lines (a count holds until the next
// sample) on shared axes, with a legend.
func WriteSteps(w io.Writer, title, xLabel, yLabel string, series []Series) error {
	return writeSteps(w, title, xLabel, yLabel, series, false)
}

// WriteStepsLogY is WriteSteps on a logarithmic y axis, for lines that
// differ by decades.
func WriteStepsLogY(w io.Writer, title, xLabel, yLabel string, series []Series) error {
	return writeSteps(w, title, xLabel, yLabel, series, true)
}

func writeSteps(w io.Writer, title, xLabel, yLabel string, series []Series, logY bool) error {
	return write(w, title, xLabel, yLabel, series, false, logY, func(b *strings.Builder, s Series, c string, x, y func(float64) float64) {
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
// knob), with a legend, on log-log axes: costs and stalls of policies
// span decades.
func WritePoints(w io.Writer, title, xLabel, yLabel string, series []Series) error {
	i := 0
	return write(w, title, xLabel, yLabel, series, true, true, func(b *strings.Builder, s Series, c string, x, y func(float64) float64) {
		// Later series' markers are smaller, so that one drawn on an
		// earlier one's point leaves a ring of it.
		r := max(6-0.5*float64(i), 3)
		i++
		if len(s.Points) > 1 {
			var d strings.Builder
			for j, p := range s.Points {
				fmt.Fprintf(&d, "%s%.1f %.1f ", map[bool]string{true: "M", false: "L"}[j == 0], x(p[0]), y(p[1]))
			}
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.TrimSpace(d.String()), c)
		}
		for _, p := range s.Points {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`+"\n", x(p[0]), y(p[1]), r, c)
		}
	})
}

// write draws the frame, the axes (each linear or logarithmic) and the
// legend, and each series with draw.
func write(w io.Writer, title, xLabel, yLabel string, series []Series, logX, logY bool,
	draw func(b *strings.Builder, s Series, colour string, x, y func(float64) float64)) error {
	const width, height = 880, 360
	const left, right, top, bottom = 60, 290, 36, 44
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	xa, ya := newAxis(series, 0, logX), newAxis(series, 1, logY)
	x := func(v float64) float64 { return float64(left) + xa.at(v)*pw }
	y := func(v float64) float64 { return float64(top) + ph - ya.at(v)*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for _, yv := range ya.ticks() { // grid and ticks
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, float64(left)+pw, y(yv), y(yv))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(yv)+4, tick(yv))
	}
	for _, xv := range xa.ticks() {
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

// axis maps a value to its place along an axis, 0..1: linear from 0 to
// a round maximum, or logarithmic between the powers of ten around the
// values (one at or below zero sits at the bottom).
type axis struct {
	lo, hi float64
	log    bool
}

func newAxis(series []Series, dim int, log bool) axis {
	lo, hi := math.Inf(1), 0.0
	for _, s := range series {
		for _, p := range s.Points {
			hi = max(hi, p[dim])
			if p[dim] > 0 {
				lo = min(lo, p[dim])
			}
		}
	}
	if !log {
		return axis{hi: niceCeil(max(hi, 1))}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	return axis{lo: lo, hi: hi, log: true}
}

func (a axis) at(v float64) float64 {
	if !a.log {
		return v / a.hi
	}
	if v <= a.lo {
		return 0
	}
	return math.Log10(v/a.lo) / math.Log10(a.hi/a.lo)
}

func (a axis) ticks() []float64 {
	var out []float64
	if !a.log {
		for i := 0; i <= 5; i++ {
			out = append(out, a.hi*float64(i)/5)
		}
		return out
	}
	for v := a.lo; v <= a.hi*(1+1e-9); v *= 10 {
		out = append(out, v)
	}
	return out
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
	return strconv.FormatFloat(v, 'g', 3, 64)
}
