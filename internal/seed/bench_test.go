package seed

import "testing"

// BenchmarkRenderAndBuild renders a typical seed (login user with keys, two
// 9p shares, a static network, phone home) and builds its ISO.
func BenchmarkRenderAndBuild(b *testing.B) {
	spec := typicalSpec()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkISOOnly is the baseline: building the ISO from the same, already
// rendered, files. RenderAndBuild/ISOOnly is the cost of rendering on top of
// the ISO writer.
func BenchmarkISOOnly(b *testing.B) {
	r, err := Render(typicalSpec())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildISO(r.Label, r.Files); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderDocuments renders the documents without building an ISO.
func BenchmarkRenderDocuments(b *testing.B) {
	spec := typicalSpec()
	b.ReportAllocs()
	for b.Loop() {
		pl, err := prepare(spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := renderDocuments(pl); err != nil {
			b.Fatal(err)
		}
	}
}
