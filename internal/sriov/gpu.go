package sriov

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Sysfs paths Kohaku reads and writes.
func devDir(a vfio.Address) string { return "/sys/bus/pci/devices/" + a.String() }

// NumVFsPath is the PF's sriov_numvfs: the VFs enabled now; writing a
// number enables that many (from 0), writing 0 disables them all.
func NumVFsPath(pf vfio.Address) string { return devDir(pf) + "/sriov_numvfs" }

// TotalVFsPath is the PF's sriov_totalvfs: the most VFs it can have.
func TotalVFsPath(pf vfio.Address) string { return devDir(pf) + "/sriov_totalvfs" }

// CreatablePath is a VF's list of the vGPU types it can take now.
func CreatablePath(vf vfio.Address) string { return devDir(vf) + "/nvidia/creatable_vgpu_types" }

// CurrentPath is a VF's vGPU type: its id, 0 for none; writing an id sets
// it, writing 0 clears it.
func CurrentPath(vf vfio.Address) string { return devDir(vf) + "/nvidia/current_vgpu_type" }

// Mechanisms by which a GPU's vGPUs are made.
const (
	// MechanismVF: each vGPU is a VF given a type through the vendor's
	// sysfs (current_vgpu_type) and passed through as a PCI device:
	// NVIDIA's vGPU on Ada, Hopper and later cards (vGPU 17 and later on
	// Ampere too).
	MechanismVF = "sriov-vf"
	// MechanismVFMdev: each vGPU is a mediated device made on a VF (an
	// A100 or A30 with vGPU 16 and earlier); kohaku_mdev makes them, with
	// the VF as parent.
	MechanismVFMdev = "sriov-mdev"
	// MechanismNone: the GPU has VFs (or can have them) but none offers
	// vGPU types: VFs not enabled yet, or the vendor's vGPU manager not
	// loaded.
	MechanismNone = ""
)

// VF is one virtual function of a GPU.
type VF struct {
	Address vfio.Address
	// Group is its IOMMU group (vfio.NoGroup without an IOMMU).
	Group  int
	Driver string
	// Vendor reports whether the VF has the vendor's vGPU files.
	Vendor bool
	// Current is the id of the vGPU type set on the VF, 0 for none.
	Current int
	// Creatable are the types the VF can take now, as the vendor lists
	// them (nothing while it has a type).
	Creatable []Type
	// MdevTypes are the mediated-device types it offers (MechanismVFMdev).
	MdevTypes    []string
	ResetMethods []string
}

// GPU is one SR-IOV capable GPU (physical function) of a host.
type GPU struct {
	Address            vfio.Address
	VendorID, DeviceID uint16
	Model, Driver      string
	NUMANode           int
	// MaxVFs is sriov_totalvfs; NumVFs how many are enabled now.
	MaxVFs, NumVFs int
	VFs            []VF
	ResetMethods   []string
	// Mechanism says how its vGPUs are made (Mechanism*).
	Mechanism string
	// Types are every type any VF lists or runs, by id, with the names
	// the VFs give them.
	Types []Type
}

// Read finds the host's SR-IOV GPUs in inv (libvirt's node devices) and
// reads their sysfs files through files in one call: the VF counts, each
// VF's vGPU types and each function's reset methods. A PF counts when it
// is a display controller that can have VFs, or when its VFs carry the
// vendor's vGPU files whatever its class (the nested host's stand-in is an
// NVMe controller). files may be nil (tcp and tls connections): what
// libvirt says is kept and the vGPU types are unknown.
func Read(ctx context.Context, inv *vfio.Inventory, files vfio.HostFiles) ([]GPU, error) {
	var pfs []*vfio.Device
	for _, d := range inv.Devices() {
		if d.MaxVFs > 0 || len(d.VFs) > 0 {
			pfs = append(pfs, d)
		}
	}
	return readPFs(ctx, inv, files, pfs, false)
}

// ReadGPU reads one PF, whatever its class; an error when inv has no such
// function or it has no SR-IOV capability.
func ReadGPU(ctx context.Context, inv *vfio.Inventory, files vfio.HostFiles, pf vfio.Address) (*GPU, error) {
	d := inv.Lookup(pf)
	if d == nil {
		return nil, fmt.Errorf("the host has no PCI function %s", pf)
	}
	if d.IsVF() {
		return nil, fmt.Errorf("%s is a virtual function of %s: name its physical function", pf, d.PhysFunction)
	}
	gpus, err := readPFs(ctx, inv, files, []*vfio.Device{d}, true)
	if err != nil {
		return nil, err
	}
	if len(gpus) == 0 || (gpus[0].MaxVFs == 0 && gpus[0].NumVFs == 0) {
		return nil, fmt.Errorf("%s (%s) has no SR-IOV capability: it cannot have virtual functions", pf, d.ProductName)
	}
	return &gpus[0], nil
}

func readPFs(ctx context.Context, inv *vfio.Inventory, files vfio.HostFiles, pfs []*vfio.Device, anyClass bool) ([]GPU, error) {
	got := map[string][]byte{}
	if files != nil && len(pfs) > 0 {
		var paths []string
		for _, d := range pfs {
			paths = append(paths, TotalVFsPath(d.Address), NumVFsPath(d.Address), vfio.ResetMethodPath(d.Address))
			for _, vf := range d.VFs {
				paths = append(paths, CreatablePath(vf), CurrentPath(vf), vfio.ResetMethodPath(vf))
			}
		}
		var err error
		if got, err = files.ReadHostFiles(ctx, paths, 64<<10); err != nil {
			return nil, fmt.Errorf("reading the SR-IOV GPUs' sysfs files: %w", err)
		}
	}
	var out []GPU
	for _, d := range pfs {
		g, err := readPF(inv, got, d)
		if err != nil {
			return nil, err
		}
		if anyClass || vfio.IsDisplay(d.Class) || g.Mechanism != MechanismNone {
			out = append(out, g)
		}
	}
	return out, nil
}

func readPF(inv *vfio.Inventory, got map[string][]byte, d *vfio.Device) (GPU, error) {
	g := GPU{
		Address: d.Address, VendorID: d.VendorID, DeviceID: d.ProductID, Model: d.ProductName,
		Driver: d.Driver, NUMANode: d.NUMANode, MaxVFs: d.MaxVFs, NumVFs: len(d.VFs),
		ResetMethods: vfio.ParseResetMethod(got[vfio.ResetMethodPath(d.Address)]),
	}
	if n, ok := atoiFile(got, TotalVFsPath(d.Address)); ok {
		g.MaxVFs = n
	}
	if n, ok := atoiFile(got, NumVFsPath(d.Address)); ok {
		g.NumVFs = n
	}
	seen := map[int]string{}
	for _, a := range d.VFs {
		vf := VF{Address: a, Group: vfio.NoGroup, ResetMethods: vfio.ParseResetMethod(got[vfio.ResetMethodPath(a)])}
		if v := inv.Lookup(a); v != nil {
			vf.Group, vf.Driver, vf.MdevTypes = v.Group, v.Driver, v.MdevTypes
		}
		if cur, ok := got[CurrentPath(a)]; ok {
			vf.Vendor = true
			id, err := ParseCurrent(cur)
			if err != nil {
				return GPU{}, fmt.Errorf("%s: %w", CurrentPath(a), err)
			}
			vf.Current = id
			if vf.Creatable, err = ParseTypes(got[CreatablePath(a)]); err != nil {
				return GPU{}, fmt.Errorf("%s: %w", CreatablePath(a), err)
			}
			for _, t := range vf.Creatable {
				seen[t.ID] = t.Name
			}
		}
		switch {
		case vf.Vendor:
			g.Mechanism = MechanismVF
		case len(vf.MdevTypes) > 0 && g.Mechanism == MechanismNone:
			g.Mechanism = MechanismVFMdev
		}
		g.VFs = append(g.VFs, vf)
	}
	for _, vf := range g.VFs {
		if _, ok := seen[vf.Current]; vf.Current != 0 && !ok {
			seen[vf.Current] = ""
		}
	}
	for id, name := range seen {
		t := Type{ID: id, Name: name}
		t.parseTypeName()
		g.Types = append(g.Types, t)
	}
	slices.SortFunc(g.Types, func(a, b Type) int { return a.ID - b.ID })
	return g, nil
}

func atoiFile(got map[string][]byte, path string) (int, bool) {
	b, ok := got[path]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil && n >= 0
}

// TypeByID returns the GPU's type with that id; a type only seen set on a
// VF has an empty name.
func (g *GPU) TypeByID(id int) Type {
	for _, t := range g.Types {
		if t.ID == id {
			return t
		}
	}
	return Type{ID: id}
}

// Running returns the types set on the GPU's VFs now, each with the VFs
// that run it, ordered by type id.
func (g *GPU) Running() map[int][]vfio.Address {
	out := map[int][]vfio.Address{}
	for _, vf := range g.VFs {
		if vf.Current != 0 {
			out[vf.Current] = append(out[vf.Current], vf.Address)
		}
	}
	return out
}

// ConflictError is a type that cannot run on a GPU beside what runs there.
type ConflictError struct {
	GPU     vfio.Address
	Want    Type
	Running Type
	On      []vfio.Address
}

func (e *ConflictError) Error() string {
	on := make([]string, len(e.On))
	for i, a := range e.On {
		on[i] = a.String()
	}
	why := "a time-sliced GPU runs one vGPU type at a time"
	if e.Want.MIG() != e.Running.MIG() {
		why = "MIG-backed and time-sliced vGPUs cannot share a GPU"
	}
	return fmt.Sprintf("vGPU type %s cannot run on GPU %s: its VF %s already runs %s, and %s. "+
		"Ask for %q, or for another GPU (or give those VFs back first)",
		typeLabel(e.Want), e.GPU, strings.Join(on, ", "), typeLabel(e.Running), why, e.Running.Name)
}

func typeLabel(t Type) string {
	if t.Name == "" {
		return fmt.Sprintf("id %d", t.ID)
	}
	return t.String()
}

// Check says whether t can run on the GPU beside the types its VFs run
// now: a time-sliced type only alone or beside itself, a MIG-backed type
// beside other MIG-backed types only (NVIDIA's rules; the host's driver
// has the last word when the type is set).
func (g *GPU) Check(t Type) error {
	running := g.Running()
	ids := make([]int, 0, len(running))
	for id := range running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if id == t.ID {
			continue
		}
		r := g.TypeByID(id)
		if t.MIG() && r.MIG() {
			continue
		}
		return &ConflictError{GPU: g.Address, Want: t, Running: r, On: running[id]}
	}
	return nil
}

// Free returns the VFs that can take t now: the vendor lists t among the
// VF's creatable types and no type is set on it, and skip (when set)
// does not exclude it; in address order.
func (g *GPU) Free(t Type, skip func(vfio.Address) bool) []VF {
	var out []VF
	for _, vf := range g.VFs {
		if !vf.Vendor || vf.Current != 0 || (skip != nil && skip(vf.Address)) {
			continue
		}
		if slices.ContainsFunc(vf.Creatable, func(c Type) bool { return c.ID == t.ID }) {
			out = append(out, vf)
		}
	}
	return out
}

// Offer is what a GPU offers of one type now.
type Offer struct {
	Type Type
	// InUse counts the VFs that run the type.
	InUse int
	// Available counts the instances that can still be made: the free VFs
	// that list the type. While no type runs, every VF lists every type
	// that fits an empty GPU, so it is bounded too by the framebuffer (the
	// largest time-sliced type is the whole-GPU profile: 48 GiB on an
	// L40S); once one runs, the driver lists only what still fits, and
	// has the last word when the type is set.
	Available int
}

// Offers lists the types any VF lists or runs with what is left of each.
func (g *GPU) Offers() []Offer {
	running := g.Running()
	total := 0
	for _, t := range g.Types {
		if !t.MIG() && t.FramebufferGiB > total {
			total = t.FramebufferGiB
		}
	}
	var out []Offer
	for _, t := range g.Types {
		o := Offer{Type: t, InUse: len(running[t.ID]), Available: len(g.Free(t, nil))}
		if len(running) == 0 && !t.MIG() && t.FramebufferGiB > 0 && total > 0 {
			o.Available = min(o.Available, total/t.FramebufferGiB)
		}
		if g.Check(t) != nil {
			o.Available = 0
		}
		out = append(out, o)
	}
	return out
}

// VFTypes is what the vendor's sysfs says of one VF's vGPU types.
type VFTypes struct {
	Current   int
	Creatable []Type
}

// ReadVFTypes reads the vGPU files of the given VFs in one call; a VF
// without them (no vendor vGPU manager) is left out.
func ReadVFTypes(ctx context.Context, files vfio.HostFiles, vfs []vfio.Address) (map[vfio.Address]VFTypes, error) {
	if len(vfs) == 0 {
		return nil, nil
	}
	paths := make([]string, 0, 2*len(vfs))
	for _, a := range vfs {
		paths = append(paths, CurrentPath(a), CreatablePath(a))
	}
	got, err := files.ReadHostFiles(ctx, paths, 64<<10)
	if err != nil {
		return nil, err
	}
	out := map[vfio.Address]VFTypes{}
	for _, a := range vfs {
		cur, ok := got[CurrentPath(a)]
		if !ok {
			continue
		}
		var t VFTypes
		if t.Current, err = ParseCurrent(cur); err != nil {
			return nil, fmt.Errorf("%s: %w", CurrentPath(a), err)
		}
		if t.Creatable, err = ParseTypes(got[CreatablePath(a)]); err != nil {
			return nil, fmt.Errorf("%s: %w", CreatablePath(a), err)
		}
		out[a] = t
	}
	return out, nil
}
