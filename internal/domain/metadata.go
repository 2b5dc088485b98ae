package domain

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MetadataNamespace is the XML namespace of the kohaku element Build puts in
// the domain's <metadata>.
const MetadataNamespace = "https://kohaku.dev/xmlns/vm/1"

// Metadata is what the kohaku element in <metadata> records.
type Metadata struct {
	// SpecHash is Hash of the spec the domain was defined from.
	SpecHash string
	Owner    Ownership
	// Placed says Kohaku wrote the domain's NUMA binding (for its GPUs), so
	// Merge removes it when the spec no longer has one; a binding Kohaku
	// did not write is kept.
	Placed bool
	// DataDisks are the serials of the data disks Kohaku attached, so Merge
	// removes one the spec no longer names and keeps disks it did not attach.
	DataDisks []string
}

func dataDiskSerials(disks []DataDisk) []string {
	var out []string
	for _, d := range disks {
		out = append(out, d.Serial)
	}
	return out
}

// xmlMetadata is the wire form:
//
//	<vm xmlns="https://kohaku.dev/xmlns/vm/1">
//	  <spec-hash>…</spec-hash>
//	  <seed id="…"/>
//	  <owned-volume pool="default" volume="vm1-root.qcow2"/>
//	  <data-disk serial="scratch"/>
//	</vm>
type xmlMetadata struct {
	XMLName  xml.Name         `xml:"https://kohaku.dev/xmlns/vm/1 vm"`
	SpecHash string           `xml:"spec-hash,omitempty"`
	Seed     *xmlMetadataSeed `xml:"seed"`
	Volumes  []xmlOwnedVolume `xml:"owned-volume"`
	Placed   *struct{}        `xml:"numa-placement"`
	Disks    []xmlDataDisk    `xml:"data-disk"`
}

type xmlDataDisk struct {
	Serial string `xml:"serial,attr"`
}

type xmlMetadataSeed struct {
	ID string `xml:"id,attr"`
}

type xmlOwnedVolume struct {
	Pool   string `xml:"pool,attr"`
	Volume string `xml:"volume,attr"`
}

// marshalMetadata encodes m as the kohaku element, indented to sit inside
// <metadata> of a domain marshalled with two-space indentation.
func marshalMetadata(m Metadata) (string, error) {
	x := xmlMetadata{SpecHash: m.SpecHash}
	if m.Placed {
		x.Placed = &struct{}{}
	}
	if m.Owner.SeedID != "" {
		x.Seed = &xmlMetadataSeed{ID: m.Owner.SeedID}
	}
	for _, v := range m.Owner.Volumes {
		x.Volumes = append(x.Volumes, xmlOwnedVolume(v))
	}
	for _, s := range m.DataDisks {
		x.Disks = append(x.Disks, xmlDataDisk{Serial: s})
	}
	b, err := xml.MarshalIndent(x, "    ", "  ")
	if err != nil {
		return "", fmt.Errorf("encode kohaku metadata: %w", err)
	}
	return "\n" + string(b) + "\n  ", nil
}

// parseMetadata finds the kohaku element among the children of <metadata>
// (other tools may have put their own elements there) and decodes it. It
// returns nil when there is none.
func parseMetadata(inner string) (*Metadata, error) {
	dec := xml.NewDecoder(strings.NewReader(inner))
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read <metadata>: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 && t.Name.Space == MetadataNamespace && t.Name.Local == "vm" {
				var x xmlMetadata
				if err := dec.DecodeElement(&x, &t); err != nil {
					return nil, fmt.Errorf("decode kohaku metadata: %w", err)
				}
				m := &Metadata{SpecHash: x.SpecHash, Placed: x.Placed != nil}
				if x.Seed != nil {
					m.Owner.SeedID = x.Seed.ID
				}
				for _, v := range x.Volumes {
					m.Owner.Volumes = append(m.Owner.Volumes, VolumeRef(v))
				}
				for _, d := range x.Disks {
					m.DataDisks = append(m.DataDisks, d.Serial)
				}
				return m, nil
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
}

// withoutKohakuMetadata returns the children of <metadata> (inner) with
// Kohaku's element cut out, byte for byte as they were otherwise.
func withoutKohakuMetadata(inner string) (string, error) {
	dec := xml.NewDecoder(strings.NewReader(inner))
	depth := 0
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return inner, nil
		}
		if err != nil {
			return "", fmt.Errorf("read <metadata>: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 && t.Name.Space == MetadataNamespace && t.Name.Local == "vm" {
				if err := dec.Skip(); err != nil {
					return "", fmt.Errorf("read <metadata>: %w", err)
				}
				end := dec.InputOffset()
				before := strings.TrimRight(inner[:start], " \t\n")
				return before + inner[end:], nil
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
}

// otherMetadata names the elements of <metadata> other than Kohaku's
// ("{namespace}name"), which other tools put there.
func otherMetadata(inner string) []string {
	dec := xml.NewDecoder(strings.NewReader(inner))
	var names []string
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return names
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 && t.Name.Space != MetadataNamespace {
				names = append(names, "{"+t.Name.Space+"}"+t.Name.Local)
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
}

// SetOwnedVolumes returns domainXML with the volumes Kohaku's metadata
// records as owned replaced by vols, and every other byte as it was: the
// rest of Kohaku's element, other tools' metadata and everything outside
// <metadata>. A domain without Kohaku's element gets one that records only
// vols. It is for a domain defined from another host's XML (a move), where
// what this VM owns differs from what it owned there.
func SetOwnedVolumes(domainXML string, vols []VolumeRef) (string, error) {
	dec := xml.NewDecoder(strings.NewReader(domainXML))
	// The byte offsets of <metadata>'s inner XML, or of the whole element
	// when it is empty (<metadata/>), and of </domain>.
	depth, inner, innerEnd, domainEnd := 0, -1, -1, -1
	for innerEnd < 0 && domainEnd < 0 {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read the domain's XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 2 && t.Name.Local == "metadata" && inner < 0 {
				inner = int(dec.InputOffset())
				if strings.HasSuffix(domainXML[before:inner], "/>") {
					// Self-closing: write a whole element in its place.
					domainXML = domainXML[:before] + "<metadata></metadata>" + domainXML[inner:]
					return SetOwnedVolumes(domainXML, vols)
				}
			}
		case xml.EndElement:
			switch {
			case depth == 2 && t.Name.Local == "metadata" && inner >= 0:
				innerEnd = before
			case depth == 1 && t.Name.Local == "domain":
				domainEnd = before
			}
			depth--
		}
	}
	m := &Metadata{}
	head, tail, others := "", "", ""
	switch {
	case innerEnd >= 0:
		head, tail = domainXML[:inner], domainXML[innerEnd:]
		got, err := parseMetadata(domainXML[inner:innerEnd])
		if err != nil {
			return "", err
		}
		if got != nil {
			m = got
		}
		if others, err = withoutKohakuMetadata(domainXML[inner:innerEnd]); err != nil {
			return "", err
		}
	case domainEnd >= 0:
		head, tail = domainXML[:domainEnd]+"  <metadata>", "</metadata>\n"+domainXML[domainEnd:]
	default:
		return "", errors.New("read the domain's XML: no <domain> element")
	}
	m.Owner.Volumes = slices.Clone(vols)
	own, err := marshalMetadata(*m)
	if err != nil {
		return "", err
	}
	return head + strings.TrimRight(others, " \n\t") + own + tail, nil
}
