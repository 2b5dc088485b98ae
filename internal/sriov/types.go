package sriov

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Type is one vGPU type a VF can take, as the vendor's sysfs lists it
// ("1155 : NVIDIA L40S-12Q"), with what its name says.
type Type struct {
	// ID is the number written to current_vgpu_type to set the type.
	ID int
	// Name is the vendor's name, e.g. "NVIDIA L40S-12Q" or
	// "NVIDIA H100XM-1-10C".
	Name string
	// FramebufferGiB is the memory one instance has, from the name (the
	// number before the class letters); 0 when the name does not say.
	FramebufferGiB int
	// MIGSlices is the number of compute slices of a MIG-backed type
	// ("H100XM-1-10C": 1); 0 for a time-sliced type.
	MIGSlices int
	// Class is the license class letters: Q (virtual workstation), C
	// (compute), B (virtual PC), A (virtual apps), with suffixes such as
	// ME (media extensions).
	Class string
}

// MIG reports whether the type is MIG-backed: it has its own slices of
// the GPU's memory and compute, and types of different sizes can run side
// by side on one GPU (within its MIG layout).
func (t Type) MIG() bool { return t.MIGSlices > 0 }

func (t Type) String() string { return fmt.Sprintf("%s (%d)", t.Name, t.ID) }

// typeName reads NVIDIA's type names: "NVIDIA L40S-12Q", "NVIDIA
// H100XM-1-10C", "NVIDIA RTX6000-Ada-8Q", "GRID T4-16Q".
var typeName = regexp.MustCompile(`^(?:NVIDIA|GRID)\s+(\S+?)-(?:(\d+)-)?(\d+)([A-Z]+)$`)

// parseTypeName fills what t's name says of its framebuffer, MIG slices
// and class; a name of another shape leaves them zero.
func (t *Type) parseTypeName() {
	m := typeName.FindStringSubmatch(strings.TrimSpace(t.Name))
	if m == nil {
		return
	}
	if m[2] != "" {
		t.MIGSlices, _ = strconv.Atoi(m[2])
	}
	t.FramebufferGiB, _ = strconv.Atoi(m[3])
	t.Class = m[4]
}

// maxTypesLines bounds what ParseTypes reads of a creatable_vgpu_types
// file: a real GPU lists a few dozen types.
const maxTypesLines = 512

// ParseTypes reads a VF's creatable_vgpu_types file: one type per line,
// as "<id> : <name>" under an "ID : vGPU Name" header (the vGPU manager's
// sysfs form) or as "<name>   <id>" (the form some of its releases and
// tools print). Lines with no type id (the header, blank lines) are
// skipped; a line with an id and no name, or a name and no id, is an
// error. At most 512 lines are read.
func ParseTypes(data []byte) ([]Type, error) {
	var out []Type
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 0; sc.Scan(); n++ {
		if n >= maxTypesLines {
			return nil, fmt.Errorf("more than %d lines: not a vGPU type list", maxTypesLines)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || isHeader(line) {
			continue
		}
		var idPart, name string
		if first, rest, ok := strings.Cut(line, ":"); ok {
			idPart, name = first, rest
		} else if i := strings.LastIndexAny(line, " \t"); i > 0 {
			name, idPart = line[:i], line[i+1:]
		} else {
			idPart = line
		}
		id, err := strconv.Atoi(strings.TrimSpace(idPart))
		name = strings.TrimSpace(name)
		if err != nil || id <= 0 || name == "" {
			return nil, fmt.Errorf("line %q: want \"<id> : <vGPU name>\" or \"<vGPU name> <id>\"", line)
		}
		t := Type{ID: id, Name: name}
		t.parseTypeName()
		out = append(out, t)
	}
	return out, sc.Err()
}

// isHeader reports whether a line is the list's header ("ID : vGPU Name").
func isHeader(line string) bool {
	f := strings.Fields(strings.ToUpper(line))
	return len(f) > 0 && f[0] == "ID"
}

// ParseCurrent reads a VF's current_vgpu_type file: the id of the type set
// on it, 0 for none.
func ParseCurrent(data []byte) (int, error) {
	s := strings.TrimSpace(string(data))
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("current_vgpu_type %q: want a type id, or 0 for none", s)
	}
	return id, nil
}

// Resolve finds the type want names among types: its id ("1155"), or its
// name, exactly or without the vendor's prefix, ignoring case ("NVIDIA
// L40S-12Q", "l40s-12q").
func Resolve(want string, types []Type) (Type, bool) {
	w := strings.TrimSpace(want)
	if id, err := strconv.Atoi(w); err == nil {
		for _, t := range types {
			if t.ID == id {
				return t, true
			}
		}
		return Type{}, false
	}
	for _, t := range types {
		if strings.EqualFold(t.Name, w) || strings.EqualFold(shortName(t.Name), w) {
			return t, true
		}
	}
	return Type{}, false
}

// shortName is a type's name without "NVIDIA " or "GRID ".
func shortName(name string) string {
	if _, rest, ok := strings.Cut(strings.TrimSpace(name), " "); ok {
		return rest
	}
	return name
}
