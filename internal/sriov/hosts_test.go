package sriov

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio/vfiotest"
)

// The host trees below are laid out as the kernel and NVIDIA's vGPU
// manager lay out sysfs on real hosts: a PF's sriov_totalvfs and
// sriov_numvfs, each VF's nvidia/creatable_vgpu_types (a header line,
// then "<id> : <name>") and nvidia/current_vgpu_type, and reset_method.
// Type ids are the vGPU manager's (they differ between driver branches;
// Kohaku never assumes one).

// sysfs is a host's /sys read the way the provider reads host files.
type sysfs = vfiotest.Sysfs

func addr(s string) vfio.Address {
	a, err := vfio.ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

// host is a fake host: its node devices (what libvirt lists) and sysfs.
type host struct {
	devs []*vfio.Device
	fs   sysfs
}

func (h *host) inventory(t *testing.T) *vfio.Inventory {
	t.Helper()
	inv, err := vfio.NewInventory(h.devs)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// pf adds a physical function with total VFs, n of them enabled at
// function 4 onward of its slot (as H100 and L40S hosts number them), and
// returns the VFs' addresses.
func (h *host) pf(a string, vendor, product uint16, name string, class uint32, total, n int, reset string, group int) []vfio.Address {
	p := addr(a)
	d := &vfio.Device{Address: p, VendorID: vendor, ProductID: product, ProductName: name, Class: class,
		Driver: "nvidia", Group: group, GroupMembers: []vfio.Address{p}, NUMANode: 0, MaxVFs: total}
	var vfs []vfio.Address
	for i := 0; i < n; i++ {
		v := p
		v.Function = uint8((4 + i) % 8)
		v.Slot = p.Slot + uint8((4+i)/8)
		vfs = append(vfs, v)
		pfAddr := p
		h.devs = append(h.devs, &vfio.Device{Address: v, VendorID: vendor, ProductID: product, Class: class,
			Group: group + 1 + i, GroupMembers: []vfio.Address{v}, PhysFunction: &pfAddr, NUMANode: 0})
		h.fs.Put(vfio.ResetMethodPath(v), "flr\n")
	}
	d.VFs = vfs
	h.devs = append(h.devs, d)
	h.fs.Put(TotalVFsPath(p), fmt.Sprintln(total))
	h.fs.Put(NumVFsPath(p), fmt.Sprintln(n))
	if reset != "" {
		h.fs.Put(vfio.ResetMethodPath(p), reset+"\n")
	}
	return vfs
}

const typesHeader = "ID    : vGPU Name\n"

func typeList(lines ...string) string { return typesHeader + strings.Join(lines, "\n") + "\n" }

// h100SXM is an HGX H100 SXM5 80GB host with the vGPU manager loaded, MIG
// mode off (time-sliced types), 4 of its 32 VFs enabled, the first
// running H100XM-20C and the others offering only that type, as the
// manager does once a time-sliced type runs.
func h100SXM() *host {
	h := &host{fs: sysfs{}}
	vfs := h.pf("0000:18:00.0", 0x10de, 0x2330, "GH100 [H100 SXM5 80GB]", 0x030200, 32, 4, "flr bus", 40)
	h.fs.Put(CurrentPath(vfs[0]), "1097\n")
	h.fs.Put(CreatablePath(vfs[0]), typesHeader)
	for _, v := range vfs[1:] {
		h.fs.Put(CurrentPath(v), "0\n")
		h.fs.Put(CreatablePath(v), typeList("1097  : NVIDIA H100XM-20C"))
	}
	return h
}

// l40s is an L40S 48GB host, VFs enabled and none in use: every VF lists
// the Q profiles.
func l40s() *host {
	h := &host{fs: sysfs{}}
	vfs := h.pf("0000:3d:00.0", 0x10de, 0x26b9, "AD102GL [L40S]", 0x030200, 32, 6, "flr bus", 60)
	for _, v := range vfs {
		h.fs.Put(CurrentPath(v), "0\n")
		h.fs.Put(CreatablePath(v), typeList(
			"1155  : NVIDIA L40S-1Q", "1158  : NVIDIA L40S-4Q", "1161  : NVIDIA L40S-12Q",
			"1162  : NVIDIA L40S-16Q", "1163  : NVIDIA L40S-24Q", "1164  : NVIDIA L40S-48Q"))
	}
	return h
}

// a100 is an A100 40GB with vGPU 16: SR-IOV VFs that offer NVIDIA's
// vGPU types as mediated-device types, no nvidia/ files on them.
func a100() *host {
	h := &host{fs: sysfs{}}
	vfs := h.pf("0000:41:00.0", 0x10de, 0x20b0, "GA100 [A100 SXM4 40GB]", 0x030200, 16, 16, "flr bus", 80)
	for _, d := range h.devs {
		if d.IsVF() {
			d.MdevTypes = []string{"nvidia-468", "nvidia-469", "nvidia-470"}
		}
	}
	_ = vfs
	return h
}

// noFLR is a card with SR-IOV whose only reset method is a bus reset (no
// function-level reset), its VFs not yet enabled, and a GeForce card
// beside it without SR-IOV at all.
func noFLR() *host {
	h := &host{fs: sysfs{}}
	h.pf("0000:05:00.0", 0x10de, 0x1eb8, "TU104GL [Tesla T4]", 0x030200, 16, 0, "bus", 20)
	gf := addr("0000:06:00.0")
	h.devs = append(h.devs, &vfio.Device{Address: gf, VendorID: 0x10de, ProductID: 0x1b80, ProductName: "GP104 [GeForce GTX 1080]",
		Class: 0x030000, Driver: "nvidia", Group: 30, GroupMembers: []vfio.Address{gf}})
	h.fs.Put(vfio.ResetMethodPath(gf), "bus\n")
	return h
}

func TestReadH100SXM(t *testing.T) {
	h := h100SXM()
	gpus, err := Read(context.Background(), h.inventory(t), h.fs)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 {
		t.Fatalf("got %d GPUs, want the H100", len(gpus))
	}
	g := gpus[0]
	if g.MaxVFs != 32 || g.NumVFs != 4 || len(g.VFs) != 4 || g.Mechanism != MechanismVF {
		t.Fatalf("max %d num %d vfs %d mechanism %q; want 32, 4, 4, %q", g.MaxVFs, g.NumVFs, len(g.VFs), g.Mechanism, MechanismVF)
	}
	if g.VFs[0].Current != 1097 || g.VFs[1].Current != 0 || !g.VFs[0].Vendor {
		t.Errorf("VF types %+v", g.VFs)
	}
	run := g.Running()
	if len(run) != 1 || len(run[1097]) != 1 || run[1097][0] != g.VFs[0].Address {
		t.Errorf("running %v, want 1097 on the first VF", run)
	}
	t20 := g.TypeByID(1097)
	if t20.Name != "NVIDIA H100XM-20C" || t20.FramebufferGiB != 20 || t20.MIG() {
		t.Errorf("type 1097 = %+v", t20)
	}
	if err := g.Check(t20); err != nil {
		t.Errorf("the running type refused beside itself: %v", err)
	}
	t10 := Type{ID: 1099, Name: "NVIDIA H100XM-10C"}
	t10.parseTypeName()
	err = g.Check(t10)
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("a second time-sliced type: %v, want a ConflictError", err)
	}
	for _, want := range []string{"NVIDIA H100XM-10C (1099)", "0000:18:00.4", "NVIDIA H100XM-20C (1097)", "one vGPU type at a time"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict %q does not say %q", err, want)
		}
	}
	mig := Type{ID: 1130, Name: "NVIDIA H100XM-1-10C"}
	mig.parseTypeName()
	if err := g.Check(mig); err == nil || !strings.Contains(err.Error(), "MIG-backed and time-sliced") {
		t.Errorf("a MIG type beside a time-sliced one: %v", err)
	}
	free := g.Free(t20, func(a vfio.Address) bool { return a == g.VFs[1].Address })
	if len(free) != 2 || free[0].Address != g.VFs[2].Address {
		t.Errorf("free VFs for 20C skipping the second: %v", free)
	}
	offers := g.Offers()
	if len(offers) != 1 || offers[0].InUse != 1 || offers[0].Available != 3 {
		t.Errorf("offers %+v, want 20C: 1 in use, 3 available (3 free VFs list it)", offers)
	}
}

func TestReadL40S(t *testing.T) {
	h := l40s()
	gpus, err := Read(context.Background(), h.inventory(t), h.fs)
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[0]
	want := map[string]int{"NVIDIA L40S-1Q": 6, "NVIDIA L40S-4Q": 6, "NVIDIA L40S-12Q": 4, "NVIDIA L40S-16Q": 3, "NVIDIA L40S-24Q": 2, "NVIDIA L40S-48Q": 1}
	offers := g.Offers()
	if len(offers) != len(want) {
		t.Fatalf("offers %+v", offers)
	}
	for _, o := range offers {
		if o.Available != want[o.Type.Name] || o.InUse != 0 {
			t.Errorf("%s: %d available, %d in use; want %d, 0 (6 VFs, 48 GiB)", o.Type.Name, o.Available, o.InUse, want[o.Type.Name])
		}
	}
	for _, q := range []string{"NVIDIA L40S-12Q", "l40s-12q", "1161"} {
		if ty, ok := Resolve(q, g.Types); !ok || ty.ID != 1161 {
			t.Errorf("Resolve(%q) = %+v, %v", q, ty, ok)
		}
	}
	if _, ok := Resolve("L40S-13Q", g.Types); ok {
		t.Error("an unknown type resolved")
	}
}

func TestReadA100MdevOnVFs(t *testing.T) {
	h := a100()
	gpus, err := Read(context.Background(), h.inventory(t), h.fs)
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[0]
	if g.Mechanism != MechanismVFMdev || len(g.VFs) != 16 || len(g.Types) != 0 {
		t.Fatalf("mechanism %q, %d VFs, types %v; want %q, 16, none", g.Mechanism, len(g.VFs), g.Types, MechanismVFMdev)
	}
	if len(g.VFs[0].MdevTypes) != 3 {
		t.Errorf("VF mdev types %v", g.VFs[0].MdevTypes)
	}
}

func TestReadNoFLRAndNoSRIOV(t *testing.T) {
	h := noFLR()
	inv := h.inventory(t)
	gpus, err := Read(context.Background(), inv, h.fs)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0].Address != addr("0000:05:00.0") {
		t.Fatalf("got %+v, want only the T4 (the GTX 1080 has no SR-IOV)", gpus)
	}
	g := gpus[0]
	if g.NumVFs != 0 || g.Mechanism != MechanismNone || len(g.ResetMethods) != 1 || g.ResetMethods[0] != "bus" {
		t.Errorf("T4: %d VFs, mechanism %q, reset %v; want 0, none, [bus]", g.NumVFs, g.Mechanism, g.ResetMethods)
	}
	if (vfio.Function{ResetMethods: g.ResetMethods}).HasFLR() {
		t.Error("a bus-reset-only card reads as having FLR")
	}
	_, err = ReadGPU(context.Background(), inv, h.fs, addr("0000:06:00.0"))
	if err == nil || !strings.Contains(err.Error(), "no SR-IOV capability") {
		t.Errorf("ReadGPU of the GTX 1080: %v", err)
	}
	if _, err = ReadGPU(context.Background(), inv, h.fs, addr("0000:07:00.0")); err == nil || !strings.Contains(err.Error(), "no PCI function") {
		t.Errorf("ReadGPU of a missing function: %v", err)
	}
}

func TestReadWithoutHostFiles(t *testing.T) {
	h := l40s()
	gpus, err := Read(context.Background(), h.inventory(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0].NumVFs != 6 || gpus[0].VFs[0].Vendor || len(gpus[0].Types) != 0 {
		t.Errorf("over tcp: %+v; want the VFs libvirt lists and no types", gpus)
	}
}

func TestReadVFOfAVF(t *testing.T) {
	h := l40s()
	inv := h.inventory(t)
	_, err := ReadGPU(context.Background(), inv, h.fs, addr("0000:3d:00.4"))
	if err == nil || !strings.Contains(err.Error(), "virtual function of 0000:3d:00.0") {
		t.Errorf("ReadGPU of a VF: %v", err)
	}
}
