// Command e2echart draws the end-to-end benchmark's chart (seconds against
// N for Kohaku, the same-schema floor and the Terraform floor; apply, plan
// and destroy) from the first table of those figures in a markdown file:
// the harness's report, or BENCHMARKS.md for the chart committed beside it.
//
//	go run ./internal/bench/e2echart -in BENCHMARKS.md -out bench/e2e.svg
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/kohaku/terraform-provider-kohaku/internal/bench/chart"
)

func main() {
	in := flag.String("in", "BENCHMARKS.md", "markdown file with the harness's table")
	out := flag.String("out", "bench/e2e.svg", "SVG file to write")
	title := flag.String("title", chart.DefaultTitle, "the chart's title")
	flag.Parse()
	if err := run(*in, *out, *title); err != nil {
		fmt.Fprintln(os.Stderr, "e2echart:", err)
		os.Exit(1)
	}
}

func run(in, out, title string) error {
	md, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	panels, err := chart.FromMarkdown(string(md))
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	var b bytes.Buffer
	if err := chart.WriteSVG(&b, title, panels); err != nil {
		return err
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}
