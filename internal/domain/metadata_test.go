package domain

import (
	"reflect"
	"testing"
)

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []Metadata{
		{},
		{SpecHash: "abc"},
		{SpecHash: "abc", Owner: Ownership{SeedID: "default/vm1-seed.iso"}},
		{SpecHash: "abc", Owner: Ownership{
			SeedID:  "s<&>'\"",
			Volumes: []VolumeRef{{Pool: "default", Volume: "vm1-root.qcow2"}, {Pool: "fast", Volume: "vm1-data.qcow2"}},
		}},
	}
	for _, m := range tests {
		inner, err := marshalMetadata(m)
		if err != nil {
			t.Fatalf("marshalMetadata(%+v): %v", m, err)
		}
		got, err := parseMetadata(inner)
		if err != nil {
			t.Fatalf("parseMetadata(%q): %v", inner, err)
		}
		if got == nil || !reflect.DeepEqual(*got, m) {
			t.Errorf("round trip of %+v gave %+v (XML %q)", m, got, inner)
		}
	}
}

func TestParseMetadataForms(t *testing.T) {
	t.Parallel()
	want := &Metadata{SpecHash: "h1", Owner: Ownership{SeedID: "seed-1", Volumes: []VolumeRef{{Pool: "p", Volume: "v"}}}}
	tests := []struct {
		name  string
		inner string
		want  *Metadata
	}{
		{"empty", "", nil},
		{"whitespace only", "\n    \n  ", nil},
		{"default namespace, as Build writes and libvirt keeps it",
			`<vm xmlns="https://kohaku.dev/xmlns/vm/1"><spec-hash>h1</spec-hash><seed id="seed-1"/><owned-volume pool="p" volume="v"/></vm>`, want},
		{"prefixed, as virDomainSetMetadata writes it",
			`<kohaku:vm xmlns:kohaku="https://kohaku.dev/xmlns/vm/1"><kohaku:spec-hash>h1</kohaku:spec-hash><kohaku:seed id="seed-1"/><kohaku:owned-volume pool="p" volume="v"/></kohaku:vm>`, want},
		{"after another tool's element",
			`<libosinfo:libosinfo xmlns:libosinfo="http://libosinfo.org/xmlns/libvirt/domain/1.0"><libosinfo:os id="http://debian.org/debian/12"/></libosinfo:libosinfo>` +
				`<vm xmlns="https://kohaku.dev/xmlns/vm/1"><spec-hash>h1</spec-hash><seed id="seed-1"/><owned-volume pool="p" volume="v"/></vm>`, want},
		{"same local name, other namespace", `<vm xmlns="https://example.com/other"><spec-hash>nope</spec-hash></vm>`, nil},
		{"nested kohaku element is not ours", `<x:wrap xmlns:x="urn:x"><vm xmlns="https://kohaku.dev/xmlns/vm/1"><spec-hash>nope</spec-hash></vm></x:wrap>`, nil},
		{"unknown children are ignored", `<vm xmlns="https://kohaku.dev/xmlns/vm/1"><future/><spec-hash>h2</spec-hash></vm>`, &Metadata{SpecHash: "h2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseMetadata(tc.inner)
			if err != nil {
				t.Fatalf("parseMetadata: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseMetadataMalformed(t *testing.T) {
	t.Parallel()
	for _, inner := range []string{
		`<vm xmlns="https://kohaku.dev/xmlns/vm/1"><spec-hash>h</vm>`,
		`<vm xmlns="https://kohaku.dev/xmlns/vm/1"><seed id="x"></seed>`,
		`<other>`,
	} {
		if m, err := parseMetadata(inner); err == nil {
			t.Errorf("parseMetadata(%q) = %+v, nil; want an error", inner, m)
		}
	}
}
