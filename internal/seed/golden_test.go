package seed

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenSummary is what the golden result.json records next to the
// documents.
type goldenSummary struct {
	Format         Format   `json:"format"`
	Label          string   `json:"label"`
	Files          []string `json:"files"`
	InstanceID     string   `json:"instance_id"`
	MACs           []string `json:"macs"`
	ISOSHA256      string   `json:"iso_sha256"`
	ISOBytes       int      `json:"iso_bytes"`
	UserDataMerged bool     `json:"user_data_merged"`
	Warnings       []string `json:"warnings"`
}

func summarize(r *Result) goldenSummary {
	s := goldenSummary{
		Format: r.Format, Label: r.Label, InstanceID: r.InstanceID, MACs: r.MACs,
		ISOSHA256: r.ISOSHA256, ISOBytes: len(r.ISO), UserDataMerged: r.UserDataMerged, Warnings: r.Warnings,
	}
	for name := range r.Files {
		s.Files = append(s.Files, name)
	}
	sort.Strings(s.Files)
	if s.Warnings == nil {
		s.Warnings = []string{}
	}
	return s
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenSpecs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Render(tc.spec(t))
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			dir := filepath.Join("testdata", "golden", tc.name)
			want := map[string][]byte{}
			for name, b := range r.Files {
				want[name] = b
			}
			sum, err := json.MarshalIndent(summarize(r), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			want["result.json"] = append(sum, '\n')

			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				for name, b := range want {
					p := filepath.Join(dir, filepath.FromSlash(name))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}

			// Every golden file must be rendered, and every rendered file
			// must have a golden one.
			var onDisk []string
			err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				onDisk = append(onDisk, filepath.ToSlash(rel))
				return nil
			})
			if err != nil {
				t.Fatalf("reading golden files (run go test -run TestGolden -update): %v", err)
			}
			for _, name := range onDisk {
				if _, ok := want[name]; !ok {
					t.Errorf("golden file %s was not rendered", name)
				}
			}
			for name, b := range want {
				g, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
				if err != nil {
					t.Errorf("missing golden file (run go test -run TestGolden -update): %v", err)
					continue
				}
				if !bytes.Equal(g, b) {
					t.Errorf("%s differs from its golden file (run go test -run TestGolden -update to accept)\n--- got\n%s\n--- want\n%s", name, b, g)
				}
			}
		})
	}
}
