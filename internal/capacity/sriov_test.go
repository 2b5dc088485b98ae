package capacity

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/claim"
	"github.com/kohaku/terraform-provider-kohaku/internal/placement"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// l40sDoc is libvirt's node device of an L40S with two VFs enabled (as
// libvirt 9 prints it), or of one of its VFs.
func l40sDoc(fn int, vfs ...int) string {
	caps := ""
	if fn == 0 {
		caps = "<capability type='virt_functions' maxCount='32'>"
		for _, v := range vfs {
			caps += fmt.Sprintf("<address domain='0x0000' bus='0x3d' slot='0x00' function='0x%x'/>", v)
		}
		caps += "</capability>"
	} else {
		caps = "<capability type='phys_function'><address domain='0x0000' bus='0x3d' slot='0x00' function='0x0'/></capability>"
	}
	driver := "nvidia"
	if fn == 5 {
		driver = "vfio-pci"
	}
	return fmt.Sprintf(`<device><name>pci_0000_3d_00_%d</name><driver><name>%s</name></driver><capability type='pci'>
<class>0x030200</class><domain>0</domain><bus>61</bus><slot>0</slot><function>%d</function>
<product id='0x26b9'>AD102GL [L40S]</product><vendor id='0x10de'>NVIDIA Corporation</vendor>%s
<iommuGroup number='%d'><address domain='0x0000' bus='0x3d' slot='0x00' function='0x%x'/></iommuGroup>
<numa node='1'/></capability></device>`, fn, driver, fn, caps, 60+fn, fn)
}

func TestReadHost_SRIOVGPU(t *testing.T) {
	t.Parallel()
	f := &fakeHost{vols: map[string][]byte{}, calls: map[string]int{}, docs: []string{l40sDoc(0, 4, 5), l40sDoc(4), l40sDoc(5)}}
	vf4, vf5 := vfio.Address{Bus: 0x3d, Function: 4}, vfio.Address{Bus: 0x3d, Function: 5}
	f.domains = []claim.Domain{{Name: "infer-1", UUID: "u-1", Hostdevs: []vfio.Address{vf5}}}
	types := "ID    : vGPU Name\n1161  : NVIDIA L40S-12Q\n"
	r := &Reader{
		Host: func(string) (Host, error) { return f, nil },
		Files: func(string) vfio.HostFiles {
			return files{
				sriov.CurrentPath(vf4): []byte("0\n"), sriov.CreatablePath(vf4): []byte(types),
				sriov.CurrentPath(vf5): []byte("1161\n"), sriov.CreatablePath(vf5): []byte("ID    : vGPU Name\n"),
				sriov.NumVFsPath(vfio.Address{Bus: 0x3d}): []byte("2\n"), sriov.TotalVFsPath(vfio.Address{Bus: 0x3d}): []byte("32\n"),
			}
		},
	}
	h, err := r.ReadHost(context.Background(), "gpu1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.GPUs) != 1 || h.GPUs[0].State != placement.VGPUs || !strings.Contains(h.GPUs[0].Holder, "2 SR-IOV virtual functions") {
		t.Fatalf("whole GPUs %+v: want only the PF, held for its vGPUs (no VF placed whole)", h.GPUs)
	}
	if len(h.SRIOV) != 1 || len(h.SRIOV[0].VFs) != 2 || h.SRIOV[0].VFs[1].Current != 1161 || h.SRIOV[0].VFs[1].Driver != "vfio-pci" {
		t.Fatalf("SR-IOV %+v", h.SRIOV)
	}
	if h.VFUsers[vf5] != "infer-1" || h.VFUsers[vf4] != "" {
		t.Errorf("VF users %v", h.VFUsers)
	}
	o := h.SRIOV[0].Offers()
	if len(o) != 1 || o[0].InUse != 1 || o[0].Available != 1 {
		t.Errorf("offers %+v", o)
	}
}
