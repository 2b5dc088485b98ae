package domain

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// mergeInput is a domain definition Merge starts from.
type mergeInput struct {
	name string
	xml  string
}

// mergeInputs are the domains other tools left (testdata/merge/*.xml:
// virt-install's, the peer provider's, hand-written ones with hostdevs and
// NUMA tuning) and one Kohaku built.
func mergeInputs(t *testing.T) []mergeInput {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "merge", "*.xml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("merge inputs: %v (%d files)", err, len(files))
	}
	var in []mergeInput
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, mergeInput{strings.TrimSuffix(filepath.Base(f), ".xml"), string(b)})
	}
	spec := Spec{
		Name: "made-by-kohaku", Type: TypeKVM, VCPU: 2, MemoryMiB: 2048,
		Disk:          &Disk{Source: Source{Pool: "default", Volume: "made-root.qcow2"}},
		Seed:          &Seed{Source: Source{Pool: "default", Volume: "made-seed.iso"}},
		NICs:          []NIC{{Type: NICNetwork, Source: "default", MAC: "52:54:00:6b:00:01"}},
		SharedFolders: []SharedFolder{{Source: "/srv/shared", Tag: "kohaku_shared"}},
		Owner:         Ownership{SeedID: "default/made-seed.iso", Volumes: []VolumeRef{{Pool: "default", Volume: "made-root.qcow2"}}},
	}
	made, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return append(in, mergeInput{"kohaku-built", made})
}

// mergeChange is a spec change applied to what the domain reads back as;
// removed says which of the domain's devices it takes away (by a
// substring of their canonical form).
type mergeChange struct {
	name    string
	apply   func(s *Spec)
	removed func(o Observed) []string
}

func mergeChanges() []mergeChange {
	none := func(Observed) []string { return nil }
	return []mergeChange{
		{"resize", func(s *Spec) { s.MemoryMiB *= 2; s.VCPU += 2 }, none},
		{"nic-added", func(s *Spec) {
			s.NICs = append(s.NICs, NIC{Type: NICNetwork, Source: "default", Model: "virtio", MAC: "52:54:00:99:00:01"})
		}, none},
		{"nic-removed", func(s *Spec) {
			if len(s.NICs) > 0 {
				s.NICs = s.NICs[1:]
			}
		}, func(o Observed) []string {
			if len(o.Spec.NICs) == 0 {
				return nil
			}
			return []string{"interface", "address=" + o.Spec.NICs[0].MAC}
		}},
		{"share-added", func(s *Spec) {
			s.SharedFolders = append(s.SharedFolders, SharedFolder{Driver: Share9p, Source: "/srv/data", Tag: "data", AccessMode: AccessMapped})
		}, none},
		{"share-removed", func(s *Spec) { s.SharedFolders = nil }, func(o Observed) []string {
			if len(o.Spec.SharedFolders) == 0 {
				return nil
			}
			return []string{"filesystem", "dir=" + o.Spec.SharedFolders[0].Tag}
		}},
		{"data-disk-added", func(s *Spec) {
			s.DataDisks = append(s.DataDisks, DataDisk{Source: Source{Pool: "default", Volume: "scratch.qcow2"}, Serial: "scratch"})
		}, none},
		{"mdev-added", func(s *Spec) {
			s.Mdevs = append(s.Mdevs, "6B6F6861-6B75-4D64-8000-000000000001")
		}, none},
		{"mdev-removed", func(s *Spec) { s.Mdevs = nil }, func(o Observed) []string {
			if len(o.Spec.Mdevs) == 0 {
				return nil
			}
			return []string{"hostdev", "uuid=" + o.Spec.Mdevs[0]}
		}},
		{"hostdev-removed", func(s *Spec) {
			if len(s.Hostdevs) > 0 {
				s.Hostdevs = s.Hostdevs[1:]
			}
		}, func(o Observed) []string {
			if len(o.Spec.Hostdevs) == 0 {
				return nil
			}
			a, _ := ParsePCIAddress(o.Spec.Hostdevs[0])
			return []string{"hostdev", "<source><address bus=" + strconv.Itoa(int(a.Bus)) + " "}
		}},
	}
}

// TestMergeGolden merges each change over each input, compares the result
// with its file under testdata/merge/golden (-update rewrites them), and
// checks that everything Kohaku does not own survives element by element
// and that what it owns reads back as the spec.
func TestMergeGolden(t *testing.T) {
	t.Parallel()
	for _, in := range mergeInputs(t) {
		obs, err := Parse(in.xml)
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		for _, ch := range mergeChanges() {
			t.Run(in.name+"/"+ch.name, func(t *testing.T) {
				t.Parallel()
				spec := obs.Spec
				spec.NICs = slices.Clone(spec.NICs)
				spec.SharedFolders = slices.Clone(spec.SharedFolders)
				spec.Hostdevs = slices.Clone(spec.Hostdevs)
				spec.Mdevs = slices.Clone(spec.Mdevs)
				spec.DataDisks = slices.Clone(spec.DataDisks)
				if obs.Metadata == nil {
					// An imported domain: the serial port is the domain's own.
					spec.SerialLogPath = ""
				}
				ch.apply(&spec)
				got, err := Merge(in.xml, spec)
				if err != nil {
					t.Fatalf("Merge: %v", err)
				}
				checkGolden(t, filepath.Join("testdata", "merge", "golden", in.name+"."+ch.name+".xml"), got+"\n")
				checkKept(t, in.xml, got, ch.removed(obs))
				checkOwned(t, got, spec)
			})
		}
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from Merge output (run with -update if the change is intended):\n%s", path, firstDiff(string(want), got))
	}
}

// ownedTop are the top-level elements Kohaku sets (their children are
// compared apart: metadata, devices) or edits (vcpu's count).
var ownedTop = []string{"memory", "currentMemory", "vcpu", "metadata", "devices"}

// checkKept asserts that every element of before that Kohaku does not
// own is in after, unchanged: top-level elements, other tools' metadata,
// and each device except those removed names.
func checkKept(t *testing.T, before, after string, removed []string) {
	t.Helper()
	b, a := parseNode(t, before), parseNode(t, after)
	for _, c := range b.Children {
		if slices.Contains(ownedTop, c.XMLName.Local) {
			continue
		}
		if !containsNode(a.Children, c) {
			t.Errorf("<%s> was not kept as it was:\n%s", c.XMLName.Local, c.canon())
		}
	}
	if m := b.child("metadata"); m != nil {
		am := a.child("metadata")
		for _, c := range m.Children {
			if c.XMLName.Space == MetadataNamespace {
				continue
			}
			if am == nil || !containsNode(am.Children, c) {
				t.Errorf("metadata element %s was not kept", c.XMLName.Space)
			}
		}
	}
	if v := b.child("vcpu"); v != nil {
		av := a.child("vcpu")
		for _, at := range v.Attrs {
			if at.Name.Local == "cpuset" || at.Name.Local == "current" {
				continue
			}
			if av == nil || !slices.Contains(av.Attrs, at) {
				t.Errorf("<vcpu %s='%s'> was not kept", at.Name.Local, at.Value)
			}
		}
	}
	bd, ad := b.child("devices"), a.child("devices")
	for _, c := range bd.Children {
		canon := c.canon()
		if len(removed) > 0 && strings.HasPrefix(canon, "<"+removed[0]) && strings.Contains(canon, removed[1]) {
			if containsNode(ad.Children, c) {
				t.Errorf("removed device is still there:\n%s", canon)
			}
			continue
		}
		if !containsNode(ad.Children, c) {
			t.Errorf("device was not kept as it was:\n%s", canon)
		}
	}
}

// checkOwned asserts that the merged domain reads back as the spec: the
// hash covers everything Kohaku models. Free hotplug ports are left out:
// libvirt numbers the ports Merge adds, so they count only once defined.
func checkOwned(t *testing.T, got string, spec Spec) {
	t.Helper()
	o, err := Parse(got)
	if err != nil {
		t.Fatalf("Parse(merged): %v", err)
	}
	o.Spec.HotplugPorts, spec.HotplugPorts = 0, 0
	o.Spec.Owner, spec.Owner = Ownership{}, Ownership{}
	if o.Spec.SerialLogPath == "" {
		spec.SerialLogPath = ""
	}
	if Hash(o.Spec) != Hash(spec) {
		t.Errorf("merged domain reads back as\n%+v\nwant\n%+v", Normalize(o.Spec), Normalize(spec))
	}
	if o.Metadata == nil || o.Metadata.SpecHash == "" {
		t.Errorf("merged domain has no kohaku metadata")
	}
}

// node is an XML element in generic form.
type node struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []node     `xml:",any"`
}

func parseNode(t *testing.T, doc string) node {
	t.Helper()
	var n node
	if err := xml.Unmarshal([]byte(doc), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) child(name string) *node {
	for i := range n.Children {
		if n.Children[i].XMLName.Local == name {
			return &n.Children[i]
		}
	}
	return nil
}

// canon is the element with its attributes sorted and whitespace trimmed,
// namespace declarations left out (they may move).
func (n node) canon() string {
	var sb strings.Builder
	sb.WriteString("<" + n.XMLName.Local)
	var attrs []string
	for _, a := range n.Attrs {
		if a.Name.Space == "xmlns" || a.Name.Local == "xmlns" {
			continue
		}
		attrs = append(attrs, a.Name.Local+"="+canonValue(a.Value))
	}
	sort.Strings(attrs)
	for _, a := range attrs {
		sb.WriteString(" " + a)
	}
	sb.WriteString(">" + strings.TrimSpace(n.Text))
	children := make([]string, len(n.Children))
	for i, c := range n.Children {
		children[i] = c.canon()
	}
	sort.Strings(children) // libvirtxml writes some children in its own order
	for _, c := range children {
		sb.WriteString(c)
	}
	sb.WriteString("</" + n.XMLName.Local + ">")
	return sb.String()
}

// canonValue writes numbers in decimal: libvirt reads 0x10 and 16 alike,
// and libvirtxml writes some hexadecimal attributes back in decimal.
func canonValue(v string) string {
	if n, err := strconv.ParseUint(v, 0, 64); err == nil && (strings.HasPrefix(v, "0x") || v == strconv.FormatUint(n, 10)) {
		return strconv.FormatUint(n, 10)
	}
	return v
}

func containsNode(list []node, n node) bool {
	c := n.canon()
	return slices.ContainsFunc(list, func(x node) bool { return x.canon() == c })
}

// TestMergeNUMAOwnership checks that Merge removes a NUMA binding Kohaku
// wrote once the spec has none, and keeps one it did not write.
func TestMergeNUMAOwnership(t *testing.T) {
	t.Parallel()
	spec := Spec{
		Name: "numa", VCPU: 4, MemoryMiB: 4096,
		Disk: &Disk{Source: Source{Pool: "default", Volume: "numa-root.qcow2"}},
		NUMA: []NUMACell{{HostNode: 0, CPUs: "0-3"}, {HostNode: 1, CPUs: "4-7"}},
	}
	made, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := Parse(made); o.Metadata == nil || !o.Metadata.Placed {
		t.Fatalf("Build did not record its NUMA binding: %+v", o.Metadata)
	}
	unbound := spec
	unbound.NUMA = nil
	got, err := Merge(made, unbound)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"<numatune", "<vcpupin", "<numa>", "cpuset="} {
		if strings.Contains(got, gone) {
			t.Errorf("Kohaku's NUMA binding (%s) survived a spec without one:\n%s", gone, got)
		}
	}
	o, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Spec.NUMA) != 0 || o.Metadata.Placed {
		t.Errorf("merged domain still reads as bound: %+v, placed %v", o.Spec.NUMA, o.Metadata.Placed)
	}
	// Bound again by Kohaku, then merged once more unbound: the metadata
	// still tells whose binding it is.
	rebound, err := Merge(got, spec)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := Parse(rebound); len(o.Spec.NUMA) != 2 || !o.Metadata.Placed {
		t.Errorf("rebound domain reads as %+v, placed %v", o.Spec.NUMA, o.Metadata != nil && o.Metadata.Placed)
	}
}

// Kohaku's one-to-one pins are its own to change and to remove; a
// domain's own pins (no placement in Kohaku's metadata) are kept.
func TestMergePinsOwnership(t *testing.T) {
	t.Parallel()
	spec := Spec{Name: "pin", VCPU: 2, MemoryMiB: 1024, Disk: &Disk{Source: Source{Pool: "default", Volume: "pin.qcow2"}},
		CPUPins: []int{2, 3}, EmulatorCPUs: "1"}
	made, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := Parse(made); !slices.Equal(o.Spec.CPUPins, []int{2, 3}) || o.Spec.EmulatorCPUs != "1" || !o.Metadata.Placed {
		t.Fatalf("the pins did not read back: %v %q placed %v", o.Spec.CPUPins, o.Spec.EmulatorCPUs, o.Metadata.Placed)
	}
	// Kept through a merge that changes something else.
	more := spec
	more.MemoryMiB = 2048
	got, err := Merge(made, more)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := Parse(got); !slices.Equal(o.Spec.CPUPins, []int{2, 3}) || o.Spec.EmulatorCPUs != "1" {
		t.Errorf("the pins did not survive a memory change: %v %q\n%s", o.Spec.CPUPins, o.Spec.EmulatorCPUs, got)
	}
	// Removed by a spec without them.
	unpinned := spec
	unpinned.CPUPins, unpinned.EmulatorCPUs = nil, ""
	if got, err = Merge(made, unpinned); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "<vcpupin") || strings.Contains(got, "<emulatorpin") {
		t.Errorf("Kohaku's pins survived a spec without them:\n%s", got)
	}
	// A domain's own pins, with no Kohaku metadata, are not read as
	// Kohaku's and stay through a merge.
	own := strings.Replace(strings.Replace(made, "<vm xmlns", "<other xmlns", 1), "</vm>", "</other>", 1)
	o, err := Parse(own)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Spec.CPUPins) != 0 {
		t.Errorf("a domain's own pins were read as Kohaku's: %v", o.Spec.CPUPins)
	}
	if got, err = Merge(own, unpinned); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `<vcpupin vcpu="0" cpuset="2">`) || !strings.Contains(got, `<emulatorpin cpuset="1">`) {
		t.Errorf("a domain's own pins were not kept:\n%s", got)
	}
}

// TestMergeKeepsOtherMetadata checks that the other tools' elements of
// <metadata> survive byte for byte and Kohaku's is replaced, not added.
func TestMergeKeepsOtherMetadata(t *testing.T) {
	t.Parallel()
	spec := Spec{Name: "meta", VCPU: 1, MemoryMiB: 512, Disk: &Disk{Source: Source{Pool: "default", Volume: "m.qcow2"}}}
	made, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	other := `<ops:owner xmlns:ops="https://example.com/ops/1"><ops:team>ml</ops:team></ops:owner>`
	withOther := strings.Replace(made, "<metadata>", "<metadata>"+other, 1)
	spec.MemoryMiB = 1024
	got, err := Merge(withOther, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, other) {
		t.Errorf("other tool's metadata lost:\n%s", got)
	}
	if n := strings.Count(got, MetadataNamespace); n != 1 {
		t.Errorf("kohaku metadata appears %d times:\n%s", n, got)
	}
	o, _ := Parse(got)
	if o.Metadata == nil || o.Metadata.SpecHash != Hash(spec) {
		t.Errorf("kohaku metadata not updated: %+v", o.Metadata)
	}
}

// TestParseListsWhatOtherToolsAdd checks that the devices virt-install
// adds, which Merge keeps but Kohaku does not manage, are each named, so
// an import can tell the user.
func TestParseListsWhatOtherToolsAdd(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "merge", "virt-install-bios-vnc.defined.xml"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(o.Unrecognized, "\n")
	for _, want := range []string{
		"graphics vnc", "disk vdb", "input tablet on usb", "serial port 0 that is not logged to a file",
		"metadata element {http://libosinfo.org/xmlns/libvirt/domain/1.0}libosinfo",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Unrecognized does not name %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ps2") {
		t.Errorf("the PS/2 devices libvirt adds to every domain are listed:\n%s", got)
	}
}

// TestMergeKeepsLibvirtsDefaultCPU checks that a domain without <cpu>
// keeps none while the spec leaves the mode unset, and gets one when the
// spec names a mode.
func TestMergeKeepsLibvirtsDefaultCPU(t *testing.T) {
	t.Parallel()
	bare := `<domain type='qemu'><name>bare</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>` +
		`<os><type arch='x86_64' machine='q35'>hvm</type><kernel>/k</kernel><initrd>/i</initrd></os><devices></devices></domain>`
	o, err := Parse(bare)
	if err != nil {
		t.Fatal(err)
	}
	spec := o.Spec
	spec.MemoryMiB = 128
	got, err := Merge(bare, spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "<cpu") {
		t.Errorf("an unset mode added a <cpu>:\n%s", got)
	}
	spec.CPUMode = CPUMaximum
	if got, err = Merge(bare, spec); err != nil || !strings.Contains(got, `<cpu mode="maximum">`) {
		t.Errorf("a named mode was not set (%v):\n%s", err, got)
	}
}

// TestMergeKeepsTheSpecsNICOrder checks that a NIC added in front of an
// existing one reads back in the spec's order, the existing one keeps its
// element (address and all), and an interface Kohaku does not manage keeps
// its place.
func TestMergeKeepsTheSpecsNICOrder(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "merge", "hand-hostdev-numa.xml"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	spec := o.Spec
	added := NIC{Type: NICUser, Model: "e1000e"}
	spec.NICs = append([]NIC{added}, spec.NICs...)
	got, err := Merge(string(b), spec)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Spec.NICs) != 2 || back.Spec.NICs[0].Model != "e1000e" || back.Spec.NICs[1].MAC != "52:54:00:aa:bb:01" {
		t.Fatalf("NICs read back as %+v, want the new e1000e first and 52:54:00:aa:bb:01 second", back.Spec.NICs)
	}
	doc := parseNode(t, got)
	ifaces := doc.child("devices")
	var kinds []string
	for _, c := range ifaces.Children {
		if c.XMLName.Local == "interface" {
			kinds = append(kinds, c.Attrs[0].Value)
		}
	}
	if strings.Join(kinds, ",") != "user,direct,bridge" {
		t.Errorf("interfaces in the order %v, want the spec's first NIC in the first managed place, the direct one where it was", kinds)
	}
}

// TestParseListsTitleDescriptionAndOtherMetadata checks that what a person
// or another tool wrote about the domain is named too (Kohaku's metadata is
// not).
func TestParseListsTitleDescriptionAndOtherMetadata(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "merge", "hand-hostdev-numa.xml"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(o.Unrecognized, "\n")
	for _, want := range []string{`title "GPU box"`, "description", "metadata element {https://example.com/ops/1}owner", "interface 52:54:00:aa:bb:02", "watchdog itco"} {
		if !strings.Contains(got, want) {
			t.Errorf("Unrecognized does not name %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, MetadataNamespace) {
		t.Errorf("Kohaku's own metadata is listed:\n%s", got)
	}
}

// TestMergeCannotKeep shows what Merge's doc says it loses: the definition
// goes through libvirtxml's structs, so an XML comment, and an element the
// pinned libvirtxml has no field for (one a newer libvirt added), do not
// survive an update. Should a libvirtxml upgrade start keeping either,
// this test fails and the doc comment is to be corrected.
func TestMergeCannotKeep(t *testing.T) {
	t.Parallel()
	spec := Spec{Name: "limits", VCPU: 1, MemoryMiB: 512, Disk: &Disk{Source: Source{Pool: "default", Volume: "l.qcow2"}}}
	made, err := Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ add, lost string }{
		"an XML comment":              {add: "<!-- moved to rack 4 by ops -->", lost: "rack 4"},
		"an element libvirtxml lacks": {add: "<kohakuFutureElement mode='on'/>", lost: "kohakuFutureElement"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			existing := strings.Replace(made, "<devices>", "<devices>"+tc.add, 1)
			if !strings.Contains(existing, tc.lost) {
				t.Fatalf("the fixture did not take %q:\n%s", tc.add, existing)
			}
			got, err := Merge(existing, spec)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(got, tc.lost) {
				t.Errorf("Merge kept %s; correct its doc comment:\n%s", name, got)
			}
			if !strings.Contains(got, "l.qcow2") {
				t.Errorf("the rest of the definition is not kept:\n%s", got)
			}
		})
	}
}
