package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A table of the harness's report ("min / median" cells, lower-case
// "terraform floor") among other text and another table.
const report = `Kohaku end-to-end benchmark: N = 10, 50 pairs

| What | Figure |
|---|---|
| other | 1 |

| N | step | kohaku | same-schema floor | terraform floor | libvirt floor | ratio |
|---:|---|---:|---:|---:|---:|---:|
| 50 | apply | 3.90 / 4.06 | 1.80 / 1.92 | 0.25 / 0.29 | 0.70 / 0.70 | 1.55 (1.50) |
| 50 | plan | 1.54 | 1.10 | 0.08 | 0.03 | 1.36 |
| 50 | destroy | 4.05 | 2.17 | 0.36 | 0.02 | 1.85 |
| 10 | apply | 0.81 | 0.50 | 0.08 | 0.13 | 1.28 |
| 10 | plan | 0.45 | 0.36 | 0.05 | 0.01 | 1.21 |
| 10 | destroy | 0.69 | 0.54 | 0.09 | 0.01 | 1.27 |

| N | step | kohaku | same-schema floor | terraform floor |
|---:|---|---:|---:|---:|
| 200 | apply | 99 | 99 | 99 |
`

func TestFromMarkdownReadsTheFirstTable(t *testing.T) {
	panels, err := FromMarkdown(report)
	if err != nil {
		t.Fatal(err)
	}
	if len(panels) != 3 {
		t.Fatalf("got %d panels, want apply, plan and destroy", len(panels))
	}
	for i, p := range panels {
		if p.Title != Steps[i] {
			t.Errorf("panel %d is %q, want %q", i, p.Title, Steps[i])
		}
		if len(p.Series) != len(Columns) {
			t.Fatalf("%s: %d series, want %d", p.Title, len(p.Series), len(Columns))
		}
		for _, s := range p.Series {
			if len(s.Points) != 2 || s.Points[0].N != 10 || s.Points[1].N != 50 {
				t.Errorf("%s %s: points %v, want N = 10 then 50 (and nothing from the second table)", p.Title, s.Name, s.Points)
			}
		}
	}
	apply := panels[0]
	// "min / median" gives the median.
	want := map[string]float64{"Kohaku": 4.06, "same-schema floor": 1.92, "Terraform floor": 0.29}
	for _, s := range apply.Series {
		if got := s.Points[1].Seconds; got != want[s.Name] {
			t.Errorf("apply %s at N = 50: %v s, want %v", s.Name, got, want[s.Name])
		}
	}
	if got := panels[2].Series[0].Points[0].Seconds; got != 0.69 {
		t.Errorf("destroy Kohaku at N = 10: %v s, want 0.69", got)
	}
}

func TestFromMarkdownRefusesWhatItCannotChart(t *testing.T) {
	for name, md := range map[string]string{
		"no table":        "just text\n",
		"missing column":  "| N | step | kohaku | same-schema floor |\n|---|---|---|---|\n| 10 | apply | 1 | 1 |\n",
		"missing step":    "| N | step | kohaku | same-schema floor | terraform floor |\n|---|---|---|---|---|\n| 10 | apply | 1 | 1 | 1 |\n| 10 | plan | 1 | 1 | 1 |\n",
		"bad figure":      "| N | step | kohaku | same-schema floor | terraform floor |\n|---|---|---|---|---|\n| 10 | apply | fast | 1 | 1 |\n",
		"bad N":           "| N | step | kohaku | same-schema floor | terraform floor |\n|---|---|---|---|---|\n| ten | apply | 1 | 1 | 1 |\n",
		"negative figure": "| N | step | kohaku | same-schema floor | terraform floor |\n|---|---|---|---|---|\n| 10 | apply | -1 | 1 | 1 |\n",
	} {
		if _, err := FromMarkdown(md); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// svgElement is the part of an element the checks read.
type svgElement struct {
	Name  string
	Attrs map[string]string
	Text  string
}

// parseSVG decodes the document as XML, failing the test where it is not
// well-formed, and returns its elements in order.
func parseSVG(t *testing.T, doc []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var out []svgElement
	var open []int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{Name: tok.Name.Local, Attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.Attrs[a.Name.Local] = a.Value
			}
			if len(out) == 0 && (e.Name != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element is %v, want svg in the SVG namespace", tok.Name)
			}
			out = append(out, e)
			open = append(open, len(out)-1)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				out[open[len(open)-1]].Text += string(tok)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("empty document")
	}
	return out
}

func TestWriteSVGDrawsOneLinePerSeriesWithAxes(t *testing.T) {
	panels, err := FromMarkdown(report)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, "wall <seconds> & more", panels); err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, b.Bytes())

	var lines []svgElement
	texts := map[string]int{}
	for _, e := range els {
		switch e.Name {
		case "polyline", "path":
			lines = append(lines, e)
		case "text", "title":
			texts[strings.TrimSpace(e.Text)]++
		}
	}
	if len(lines) != len(panels)*len(Columns) {
		t.Fatalf("%d lines, want one per series per panel (%d)", len(lines), len(panels)*len(Columns))
	}
	if texts["wall <seconds> & more"] == 0 {
		t.Errorf("the title is not in the document (escaped and read back): %v", texts)
	}
	for _, label := range []string{"N (seed + VM pairs)", "seconds"} {
		if texts[label] != len(panels) {
			t.Errorf("axis label %q appears %d times, want once per panel (%d)", label, texts[label], len(panels))
		}
	}
	for _, step := range Steps {
		if texts[step] != 1 {
			t.Errorf("panel title %q appears %d times", step, texts[step])
		}
	}
	for _, c := range Columns {
		if texts[c.Name] != 1 {
			t.Errorf("legend entry %q appears %d times, want once", c.Name, texts[c.Name])
		}
	}
	for _, n := range []string{"10", "50"} {
		if texts[n] < len(panels) {
			t.Errorf("N tick %s appears %d times, want at least once per panel", n, texts[n])
		}
	}

	// Each line has a vertex per N, left to right, and a larger figure is
	// drawn higher (smaller y): Kohaku above both floors in every panel here.
	ys := map[string][]float64{}
	for i, l := range lines {
		pts := strings.Fields(l.Attrs["points"])
		if len(pts) != 2 {
			t.Fatalf("line %d (%s) has points %q, want 2", i, l.Attrs["data-series"], l.Attrs["points"])
		}
		var xs, y []float64
		for _, p := range pts {
			xy := strings.Split(p, ",")
			x, err1 := strconv.ParseFloat(xy[0], 64)
			yy, err2 := strconv.ParseFloat(xy[1], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("line %d: bad point %q", i, p)
			}
			xs, y = append(xs, x), append(y, yy)
		}
		if xs[0] >= xs[1] {
			t.Errorf("line %d runs right to left: %v", i, xs)
		}
		panel := Steps[i/len(Columns)]
		ys[panel+"/"+l.Attrs["data-series"]] = y
	}
	for _, step := range Steps {
		k := ys[step+"/Kohaku"]
		for _, floor := range []string{"same-schema floor", "Terraform floor"} {
			f := ys[step+"/"+floor]
			if len(k) != 2 || len(f) != 2 || k[1] >= f[1] {
				t.Errorf("%s: Kohaku at N = 50 (y %v) is not drawn above the %s (y %v)", step, k, floor, f)
			}
		}
	}

	var again bytes.Buffer
	if err := WriteSVG(&again, "wall <seconds> & more", panels); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), again.Bytes()) {
		t.Error("two writes of the same panels differ")
	}
}

func TestWriteSVGRefusesEmptyInput(t *testing.T) {
	if err := WriteSVG(io.Discard, "t", nil); err == nil {
		t.Error("no panels: no error")
	}
	if err := WriteSVG(io.Discard, "t", []Panel{{Title: "apply", Series: []Series{{Name: "Kohaku"}}}}); err == nil {
		t.Error("a series without points: no error")
	}
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.45: 0.5, 0.81: 1, 4.06: 5, 30.35: 50, 43.11: 50, 16.49: 20, 2: 2, 2.4: 2.5} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}

// The chart committed beside BENCHMARKS.md's table is the one its figures
// give: change the table and run `make bench-chart`.
func TestCommittedChartMatchesBenchmarks(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	md, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	panels, err := FromMarkdown(string(md))
	if err != nil {
		t.Fatalf("BENCHMARKS.md: %v", err)
	}
	var want bytes.Buffer
	if err := WriteSVG(&want, DefaultTitle, panels); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "bench", "e2e.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Error("bench/e2e.svg is not the chart of BENCHMARKS.md's table: run `make bench-chart` and commit it")
	}
}
