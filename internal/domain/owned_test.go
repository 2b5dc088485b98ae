package domain

import (
	"slices"
	"strings"
	"testing"
)

// SetOwnedVolumes changes only the owned volumes of Kohaku's metadata: the
// spec hash, the seed, the data disks, other tools' metadata and every byte
// outside <metadata> stay, and a domain without Kohaku's element (or
// without <metadata>) gets one.
func TestSetOwnedVolumes(t *testing.T) {
	const head = "<domain type='qemu'>\n  <!-- the user's comment -->\n  <name>vm1</name>\n  <uuid>5f0c7a4e-1d1b-4c1e-9f0e-2d3c4b5a6f70</uuid>\n"
	const tail = "  <memory unit='KiB'>65536</memory>\n  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>\n</domain>\n"
	kohaku := `<kohaku:vm xmlns:kohaku="https://kohaku.dev/xmlns/vm/1"><kohaku:spec-hash>abc</kohaku:spec-hash><kohaku:seed id="default/s.iso"/><kohaku:owned-volume pool="default" volume="vm1.qcow2"/><kohaku:data-disk serial="scratch"/></kohaku:vm>`
	other := `<app:info xmlns:app="https://example.com/app"><app:owner>team-a</app:owner></app:info>`
	moved := []VolumeRef{{Pool: "default", Volume: "vm1.qcow2"}, {Pool: "default", Volume: "s.iso"}}
	for _, tc := range []struct {
		name, metadata string
		hash           string
		others         bool
	}{
		{"kohaku and another tool", "  <metadata>\n    " + other + "\n    " + kohaku + "\n  </metadata>\n", "abc", true},
		{"kohaku only", "  <metadata>" + kohaku + "</metadata>\n", "abc", false},
		{"another tool only", "  <metadata>" + other + "</metadata>\n", "", true},
		{"empty element", "  <metadata/>\n", "", false},
		{"no metadata", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := head + tc.metadata + tail
			out, err := SetOwnedVolumes(in, moved)
			if err != nil {
				t.Fatal(err)
			}
			if withoutMetadata(out) != head+tail {
				t.Fatalf("bytes outside <metadata> changed:\n%s", out)
			}
			obs, err := Parse(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if obs.Metadata == nil || !slices.Equal(obs.Metadata.Owner.Volumes, moved) {
				t.Fatalf("owned volumes = %+v, want %v\n%s", obs.Metadata, moved, out)
			}
			if obs.Metadata.SpecHash != tc.hash {
				t.Errorf("spec hash = %q, want %q", obs.Metadata.SpecHash, tc.hash)
			}
			if tc.hash != "" && (obs.Metadata.Owner.SeedID != "default/s.iso" || !slices.Equal(obs.Metadata.DataDisks, []string{"scratch"})) {
				t.Errorf("the seed or the data disks were lost: %+v", obs.Metadata)
			}
			if got := strings.Contains(out, "<app:owner>team-a</app:owner>"); got != tc.others {
				t.Errorf("another tool's metadata kept = %v, want %v:\n%s", got, tc.others, out)
			}
			// Twice gives the same as once; none gives an element with none.
			again, err := SetOwnedVolumes(out, moved)
			if err != nil || again != out {
				t.Errorf("a second run changed the XML (%v):\n%s\n---\n%s", err, out, again)
			}
			none, err := SetOwnedVolumes(out, nil)
			if err != nil {
				t.Fatal(err)
			}
			if obs, err := Parse(none); err != nil || len(obs.Metadata.Owner.Volumes) != 0 {
				t.Errorf("owned volumes not cleared (%v): %s", err, none)
			}
		})
	}
	if _, err := SetOwnedVolumes("<network/>", moved); err == nil {
		t.Error("XML without a domain was taken")
	}
}

// withoutMetadata cuts the <metadata> element, the indentation before it
// and the line end after it, out of a domain's XML.
func withoutMetadata(x string) string {
	start, end := strings.Index(x, "<metadata>"), strings.Index(x, "</metadata>")
	if start < 0 || end < 0 {
		return x
	}
	return strings.TrimRight(x[:start], " ") + strings.TrimPrefix(x[end+len("</metadata>"):], "\n")
}
