package vmlife

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// mmioHost is a host's node devices and sysfs files.
type mmioHost struct {
	devs  map[string]string
	files map[string]string
}

func (h mmioHost) NodeDeviceXML(_ context.Context, name string) (string, error) {
	if x, ok := h.devs[name]; ok {
		return x, nil
	}
	return (&fakeHost{nodeDevs: map[string]string{}}).NodeDeviceXML(context.Background(), name)
}

func (h mmioHost) ReadHostFiles(_ context.Context, paths []string, _ int64) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		if b, ok := h.files[p]; ok {
			out[p] = []byte(b)
		}
	}
	return out, nil
}

// h100Lines is an H100 80GB's sysfs resource file at the addresses a host
// gave it: BAR0 16 MiB 32-bit, BAR1 128 GiB and BAR3 32 MiB 64-bit
// prefetchable, the ROM, and the six empty SR-IOV lines.
func h100Lines(base uint64) string {
	l := func(start, size, flags uint64) string {
		if size == 0 {
			return "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
		}
		return fmt.Sprintf("0x%016x 0x%016x 0x%016x\n", start, start+size-1, flags)
	}
	s := l(0xa2000000, 16<<20, 0x40200) + l(base, 128<<30, 0x14220c) + l(0, 0, 0) +
		l(base+128<<30, 32<<20, 0x14220c) + l(0, 0, 0) + l(0, 0, 0) + l(0xa3000000, 512<<10, 0x46200)
	return s + strings.Repeat(l(0, 0, 0), 6)
}

// Two H100s bound in one apply with the VM: gpus names the first (its
// group also holds a bridge, which has no window of its own in the guest),
// hostdevs the second. Their windows are 128 GiB + 32 MiB each, the second
// aligned to 128 GiB: 385 GiB, so 512.
func TestSizeMMIOTwoH100s(t *testing.T) {
	bridge := `<device><name>pci_0000_1a_00_0</name><capability type='pci'><class>0x060400</class><domain>0</domain><bus>26</bus><slot>0</slot><function>0</function>
<product id='0x0001'/><vendor id='0x1000'/><iommuGroup number='27'><address domain='0x0000' bus='0x1a' slot='0x00' function='0x0'/><address domain='0x0000' bus='0x1b' slot='0x00' function='0x0'/></iommuGroup></capability></device>`
	gpu := `<device><name>pci_0000_1b_00_0</name><driver><name>nvidia</name></driver><capability type='pci'><class>0x030200</class><domain>0</domain><bus>27</bus><slot>0</slot><function>0</function>
<product id='0x2331'/><vendor id='0x10de'/><iommuGroup number='27'><address domain='0x0000' bus='0x1a' slot='0x00' function='0x0'/><address domain='0x0000' bus='0x1b' slot='0x00' function='0x0'/></iommuGroup></capability></device>`
	h := mmioHost{
		devs: map[string]string{"pci_0000_1a_00_0": bridge, "pci_0000_1b_00_0": gpu},
		files: map[string]string{
			"/sys/bus/pci/devices/0000:1b:00.0/resource": h100Lines(0x28000000000),
			"/sys/bus/pci/devices/0000:9a:00.0/resource": h100Lines(0x60000000000),
		},
	}
	w, err := SizeMMIO(context.Background(), h, []string{"gpu1/0000:1b:00.0"}, []string{"0000:9a:00.0"})
	if err != nil {
		t.Fatal(err)
	}
	if w.GiB != 512 || w.MinGiB != 385 || len(w.Functions) != 2 || w.Fits() {
		t.Fatalf("got %+v", w)
	}
	if p := MMIOTooSmall(256, w); !strings.Contains(p, "at least 385 GiB") || !strings.Contains(p, "set 512") ||
		!strings.Contains(p, "0000:1b:00.0: 128 GiB + 32 MiB") {
		t.Fatalf("too small: %q", p)
	}
	if p := MMIOTooSmall(385, w); p != "" {
		t.Fatalf("385 GiB holds them: %q", p)
	}

	// A function whose BARs cannot be read is an error, not a guess.
	delete(h.files, "/sys/bus/pci/devices/0000:9a:00.0/resource")
	if _, err := SizeMMIO(context.Background(), h, nil, []string{"0000:9a:00.0"}); err == nil || !strings.Contains(err.Error(), "BARs of 0000:9a:00.0 are unknown") {
		t.Fatalf("missing resource file: %v", err)
	}
	// Nothing passed through: nothing to size.
	if w, err := SizeMMIO(context.Background(), h, nil, nil); err != nil || w.NeedBytes != 0 || !w.Fits() || MMIOTooSmall(1, w) != "" {
		t.Fatalf("no functions: %+v %v", w, err)
	}
	var _ vfio.HostFiles = h
}
