package sriov

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

func TestParseTypes(t *testing.T) {
	got, err := ParseTypes([]byte("ID    : vGPU Name\n\n1155  : NVIDIA L40S-1Q\n1161 : NVIDIA L40S-12Q\n"))
	if err != nil || len(got) != 2 || got[1].ID != 1161 || got[1].Name != "NVIDIA L40S-12Q" {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got, err := ParseTypes([]byte(typesHeader)); err != nil || len(got) != 0 {
		t.Errorf("a VF with a type set lists nothing: %+v, %v", got, err)
	}
	got, err = ParseTypes([]byte("NVIDIA A40-2Q   558\nNVIDIA A40-4Q\t559\n"))
	if err != nil || len(got) != 2 || got[0].ID != 558 || got[0].Name != "NVIDIA A40-2Q" || got[1].ID != 559 || got[0].FramebufferGiB != 2 {
		t.Errorf("the name-first form: %+v, %v", got, err)
	}
	for _, bad := range []string{"1155\n", "1155 :\n", "12x : NVIDIA L40S-1Q\n", "0 : NVIDIA L40S-1Q\n", "NVIDIA L40S-1Q\n"} {
		if _, err := ParseTypes([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	long := strings.Repeat("1 : NVIDIA L40S-1Q\n", maxTypesLines+1)
	if _, err := ParseTypes([]byte(long)); err == nil {
		t.Error("a list past the line bound accepted")
	}
}

func TestTypeNames(t *testing.T) {
	for name, want := range map[string]Type{
		"NVIDIA L40S-12Q":       {FramebufferGiB: 12, Class: "Q"},
		"NVIDIA H100XM-1-10C":   {FramebufferGiB: 10, MIGSlices: 1, Class: "C"},
		"NVIDIA H100XM-1-10CME": {FramebufferGiB: 10, MIGSlices: 1, Class: "CME"},
		"NVIDIA A100-7-40C":     {FramebufferGiB: 40, MIGSlices: 7, Class: "C"},
		"NVIDIA RTX6000-Ada-8Q": {FramebufferGiB: 8, Class: "Q"},
		"GRID T4-16Q":           {FramebufferGiB: 16, Class: "Q"},
		"something else":        {},
	} {
		got := Type{Name: name}
		got.parseTypeName()
		want.Name = name
		if got != want {
			t.Errorf("%q: %+v, want %+v", name, got, want)
		}
	}
}

func TestParseCurrent(t *testing.T) {
	if id, err := ParseCurrent([]byte("1161\n")); err != nil || id != 1161 {
		t.Errorf("got %d, %v", id, err)
	}
	for _, bad := range []string{"", "-1", "none"} {
		if _, err := ParseCurrent([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// kernel is a Writer that acts as the kernel and the vGPU manager do on
// the files Kohaku writes, over a sysfs tree.
type kernel struct {
	fs     sysfs
	writes []string
}

func (k *kernel) WriteHostFile(_ context.Context, path, value string) error {
	k.writes = append(k.writes, path+"="+value)
	old, ok := k.fs[strings.TrimPrefix(path, "/")]
	if !ok {
		return &os.PathError{Op: "open", Path: path, Err: os.ErrNotExist}
	}
	cur := strings.TrimSpace(string(old.Data))
	if strings.HasSuffix(path, "current_vgpu_type") && cur != "0" && value != "0" {
		return &os.PathError{Op: "write", Path: path, Err: syscall.EBUSY}
	}
	if strings.HasSuffix(path, "sriov_numvfs") && cur != "0" && value != "0" {
		return &os.PathError{Op: "write", Path: path, Err: syscall.EBUSY}
	}
	k.fs.Put(path, value+"\n")
	return nil
}

func TestWrites(t *testing.T) {
	ctx := context.Background()
	h := h100SXM()
	k := &kernel{fs: h.fs}
	g, err := ReadGPU(ctx, h.inventory(t), h.fs, addr("0000:18:00.0"))
	if err != nil {
		t.Fatal(err)
	}
	t20 := g.TypeByID(1097)
	if err := SetType(ctx, k, g.VFs[0].Address, t20); !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "a type is set already") {
		t.Errorf("setting a type on a VF that has one: %v", err)
	}
	if err := SetType(ctx, k, g.VFs[1].Address, t20); err != nil {
		t.Fatal(err)
	}
	var iu *InUseError
	if err := Disable(ctx, k, g); !errors.As(err, &iu) || len(iu.VFs) != 1 {
		t.Errorf("disabling VFs that run a type: %v", err)
	}
	if err := Enable(ctx, k, g, 8); err == nil || !strings.Contains(err.Error(), "only from 0") {
		t.Errorf("changing the count: %v", err)
	}
	if err := Enable(ctx, k, g, 4); err != nil {
		t.Errorf("the count it has: %v", err)
	}
	if err := Enable(ctx, k, g, 33); err == nil || !strings.Contains(err.Error(), "1 to 32") {
		t.Errorf("more than sriov_totalvfs: %v", err)
	}
	for _, vf := range g.VFs {
		if err := ClearType(ctx, k, vf.Address); err != nil {
			t.Fatal(err)
		}
	}
	if err := ClearType(ctx, k, addr("0000:18:07.7")); err != nil {
		t.Errorf("clearing a VF that is gone: %v", err)
	}
	g, _ = ReadGPU(ctx, h.inventory(t), h.fs, addr("0000:18:00.0"))
	if err := Disable(ctx, k, g); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(h.fs[strings.TrimPrefix(NumVFsPath(g.Address), "/")].Data)); got != "0" {
		t.Errorf("sriov_numvfs %s after Disable", got)
	}
	if err := Enable(ctx, k, &GPU{Address: g.Address, MaxVFs: 32}, 2); err != nil {
		t.Errorf("enabling from 0: %v", err)
	}
	_ = vfio.NoGroup
}

// nvidiaHost is the kernel with NVIDIA's sriov-manage installed (or not).
type nvidiaHost struct {
	*kernel
	installed bool
	ran       []string
}

func (n *nvidiaHost) RunSRIOVManage(_ context.Context, enable bool, pf string) error {
	if !n.installed {
		return &os.PathError{Op: "stat", Path: "/usr/lib/nvidia/sriov-manage", Err: os.ErrNotExist}
	}
	op := "-d"
	if enable {
		op = "-e"
	}
	n.ran = append(n.ran, op+" "+pf)
	return nil
}

func TestEnableOnNVIDIAUsesSRIOVManage(t *testing.T) {
	ctx := context.Background()
	g := &GPU{Address: addr("0000:3d:00.0"), Driver: vfio.DriverNVIDIA, MaxVFs: 16}
	h := &nvidiaHost{kernel: &kernel{fs: sysfs{}}, installed: true}
	h.fs.Put(NumVFsPath(g.Address), "0\n")
	if err := Enable(ctx, h, g, 16); err != nil || len(h.ran) != 1 || h.ran[0] != "-e 0000:3d:00.0" || len(h.writes) != 0 {
		t.Errorf("all VFs of an nvidia PF: %v, ran %v, wrote %v; want sriov-manage -e and no write", err, h.ran, h.writes)
	}
	g.NumVFs = 16
	if err := Disable(ctx, h, g); err != nil || len(h.ran) != 2 || h.ran[1] != "-d 0000:3d:00.0" {
		t.Errorf("disable: %v, ran %v", err, h.ran)
	}
	g.NumVFs = 0
	h.ran = nil
	if err := Enable(ctx, h, g, 4); err != nil || len(h.ran) != 0 || len(h.writes) != 1 {
		t.Errorf("4 of 16 VFs: %v, ran %v, wrote %v; want sriov_numvfs written (sriov-manage enables all)", err, h.ran, h.writes)
	}
	h2 := &nvidiaHost{kernel: &kernel{fs: sysfs{}}}
	h2.fs.Put(NumVFsPath(g.Address), "0\n")
	if err := Enable(ctx, h2, g, 16); err != nil || len(h2.writes) != 1 {
		t.Errorf("no sriov-manage on the host: %v, wrote %v; want sriov_numvfs written", err, h2.writes)
	}
}
