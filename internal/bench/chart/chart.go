// Package chart draws the end-to-end benchmark's wall times as an SVG
// chart: seconds against N for Kohaku and its floors, one panel per
// Terraform step. It writes plain SVG with the standard library and reads
// the figures from the harness's markdown table, so the chart beside a
// table in BENCHMARKS.md can be made again from that table alone. It knows
// nothing of Terraform, libvirt or how the figures were measured.
package chart

import (
	"bufio"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// DefaultTitle is the title of the benchmark's chart.
const DefaultTitle = "terraform apply, plan and destroy of N kohaku_seed + kohaku_vm: wall seconds"

// Point is one figure: seconds at N.
type Point struct {
	N       int
	Seconds float64
}

// Series is one line of a panel, points in ascending N.
type Series struct {
	Name   string
	Points []Point
}

// Panel is one step's chart (apply, plan or destroy).
type Panel struct {
	Title  string
	Series []Series
}

// Columns are the table columns charted, in series order, and the names
// the legend gives them.
var Columns = []struct{ Header, Name string }{
	{"kohaku", "Kohaku"},
	{"same-schema floor", "same-schema floor"},
	{"terraform floor", "Terraform floor"},
}

// Steps are the step names charted, one panel each, in order.
var Steps = []string{"apply", "plan", "destroy"}

// FromMarkdown reads the first table in md whose header has the columns
// N, step and every one of Columns, and returns a panel per step with a
// series per column. A cell of the harness's "min / median" form gives
// its median; a single figure is taken as it is.
func FromMarkdown(md string) ([]Panel, error) {
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var cols map[string]int // header name -> cell index, while in a matching table
	data := map[string]map[string][]Point{}
	found := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if found {
				break
			}
			cols = nil
			continue
		}
		cells := splitRow(line)
		switch {
		case cols == nil && !found:
			cols = headerColumns(cells)
			if cols != nil {
				found = true
			}
			continue
		case cols == nil:
			continue
		case isRule(cells):
			continue
		}
		if err := addRow(data, cols, cells); err != nil {
			return nil, fmt.Errorf("%w, in row %q", err, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("no table with the columns N, step, " + columnList())
	}
	var panels []Panel
	for _, step := range Steps {
		byCol, ok := data[step]
		if !ok {
			return nil, fmt.Errorf("the table has no %s rows", step)
		}
		p := Panel{Title: step}
		for _, c := range Columns {
			pts := byCol[c.Header]
			sort.Slice(pts, func(i, j int) bool { return pts[i].N < pts[j].N })
			p.Series = append(p.Series, Series{Name: c.Name, Points: pts})
		}
		panels = append(panels, p)
	}
	return panels, nil
}

func columnList() string {
	var names []string
	for _, c := range Columns {
		names = append(names, c.Header)
	}
	return strings.Join(names, ", ")
}

func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// headerColumns maps the wanted headers to their cell index, or nil when
// the row is not a header with all of them.
func headerColumns(cells []string) map[string]int {
	cols := map[string]int{}
	for i, c := range cells {
		cols[strings.ToLower(c)] = i
	}
	want := []string{"n", "step"}
	for _, c := range Columns {
		want = append(want, c.Header)
	}
	for _, w := range want {
		if _, ok := cols[w]; !ok {
			return nil
		}
	}
	return cols
}

func isRule(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, ":-") != "" {
			return false
		}
	}
	return true
}

func addRow(data map[string]map[string][]Point, cols map[string]int, cells []string) error {
	cell := func(name string) (string, error) {
		i := cols[name]
		if i >= len(cells) {
			return "", fmt.Errorf("no %s cell", name)
		}
		return cells[i], nil
	}
	nCell, err := cell("n")
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(nCell)
	if err != nil {
		return fmt.Errorf("the N cell %q is not a number", nCell)
	}
	step, err := cell("step")
	if err != nil {
		return err
	}
	if data[step] == nil {
		data[step] = map[string][]Point{}
	}
	for _, c := range Columns {
		v, err := cell(c.Header)
		if err != nil {
			return err
		}
		secs, err := seconds(v)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Header, err)
		}
		data[step][c.Header] = append(data[step][c.Header], Point{N: n, Seconds: secs})
	}
	return nil
}

// seconds reads "12.34" or the harness's "min / median" ("11.90 / 12.34").
func seconds(cell string) (float64, error) {
	parts := strings.Split(cell, "/")
	s := strings.TrimSpace(parts[len(parts)-1])
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a number of seconds", cell)
	}
	return v, nil
}

// Layout of one panel, in SVG user units.
const (
	panelW   = 300
	panelH   = 250
	marginL  = 52
	marginR  = 14
	marginT  = 30
	marginB  = 44
	titleH   = 40
	legendH  = 28
	fontSize = 12
)

// colors are the series' colours, in series order (Kohaku first).
var colors = []string{"#c0392b", "#2471a3", "#7f8c8d", "#27ae60", "#8e44ad"}

// WriteSVG draws the panels side by side under title, each with its own
// seconds axis (from 0) and N axis, and a legend for the series of the
// first panel. Output is deterministic: the same panels give the same bytes.
func WriteSVG(w io.Writer, title string, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("no panels to draw")
	}
	width := len(panels) * panelW
	height := titleH + panelH + legendH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n",
		width, height, width, height, fontSize)
	fmt.Fprintf(&b, "<title>%s</title>\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="14" font-weight="bold">%s</text>`+"\n", width/2, html.EscapeString(title))
	for i, p := range panels {
		if err := writePanel(&b, i*panelW, titleH, p); err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
	}
	writeLegend(&b, titleH+panelH+legendH/2, width, panels[0].Series)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writePanel(b *strings.Builder, x0, y0 int, p Panel) error {
	var ns []int
	maxS := 0.0
	seen := map[int]bool{}
	for _, s := range p.Series {
		if len(s.Points) == 0 {
			return fmt.Errorf("series %q has no points", s.Name)
		}
		for _, pt := range s.Points {
			if !seen[pt.N] {
				seen[pt.N] = true
				ns = append(ns, pt.N)
			}
			maxS = math.Max(maxS, pt.Seconds)
		}
	}
	sort.Ints(ns)
	top := niceCeil(maxS)
	left, right := float64(x0+marginL), float64(x0+panelW-marginR)
	bottom, upper := float64(y0+panelH-marginB), float64(y0+marginT)
	minN, maxN := float64(ns[0]), float64(ns[len(ns)-1])
	if minN == maxN {
		minN, maxN = minN-1, maxN+1
	}
	xOf := func(n int) float64 { return left + (float64(n)-minN)/(maxN-minN)*(right-left) }
	yOf := func(s float64) float64 { return bottom - s/top*(bottom-upper) }

	fmt.Fprintf(b, `<g class="panel" id="panel-%s">`+"\n", html.EscapeString(p.Title))
	fmt.Fprintf(b, `<text x="%s" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", num((left+right)/2), y0+16, html.EscapeString(p.Title))
	// Grid and seconds ticks: five steps from 0 to top.
	for i := 0; i <= 5; i++ {
		v := top * float64(i) / 5
		y := yOf(v)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e5e5"/>`+"\n", num(left), num(y), num(right), num(y))
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", num(left-5), num(y), tick(v))
	}
	// Axes.
	fmt.Fprintf(b, `<line class="axis" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`+"\n", num(left), num(bottom), num(right), num(bottom))
	fmt.Fprintf(b, `<line class="axis" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`+"\n", num(left), num(bottom), num(left), num(upper))
	for _, n := range ns {
		x := xOf(n)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`+"\n", num(x), num(bottom), num(x), num(bottom+4))
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%d</text>`+"\n", num(x), num(bottom+16), n)
	}
	fmt.Fprintf(b, `<text class="axis-label" x="%s" y="%s" text-anchor="middle">N (seed + VM pairs)</text>`+"\n", num((left+right)/2), num(bottom+34))
	fmt.Fprintf(b, `<text class="axis-label" x="%d" y="%s" text-anchor="middle" transform="rotate(-90 %d %s)">seconds</text>`+"\n",
		x0+14, num((upper+bottom)/2), x0+14, num((upper+bottom)/2))
	for i, s := range p.Series {
		color := colors[i%len(colors)]
		var pts []string
		for _, pt := range s.Points {
			pts = append(pts, num(xOf(pt.N))+","+num(yOf(pt.Seconds)))
		}
		fmt.Fprintf(b, `<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n",
			html.EscapeString(s.Name), strings.Join(pts, " "), color)
		for _, pt := range s.Points {
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"><title>%s, N = %d: %s s</title></circle>`+"\n",
				num(xOf(pt.N)), num(yOf(pt.Seconds)), color, html.EscapeString(s.Name), pt.N, strconv.FormatFloat(pt.Seconds, 'f', -1, 64))
		}
	}
	b.WriteString("</g>\n")
	return nil
}

func writeLegend(b *strings.Builder, y, width int, series []Series) {
	const item = 170
	x := (width - len(series)*item) / 2
	b.WriteString(`<g class="legend">` + "\n")
	for i, s := range series {
		color := colors[i%len(colors)]
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", x, y, x+24, y, color)
		fmt.Fprintf(b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", x+30, y, html.EscapeString(s.Name))
		x += item
	}
	b.WriteString("</g>\n")
}

// niceCeil is the smallest of 1, 2, 2.5 or 5 times a power of ten that is
// at least v (1 for v <= 0), so the axis ticks are round numbers.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

func tick(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }
