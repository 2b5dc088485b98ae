package vfio

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadHost reads every node-device XML file of testdata/<host> into an
// inventory, as the provider does with the XML libvirt returns.
func loadHost(t *testing.T, host string) *Inventory {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", host, "*.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata/%s: %v", host, err)
	}
	var docs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	inv, err := ParseInventory(docs)
	if err != nil {
		t.Fatalf("testdata/%s: %v", host, err)
	}
	return inv
}

func addr(t *testing.T, s string) Address {
	t.Helper()
	a, err := ParseAddress(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func addrs(t *testing.T, ss ...string) []Address {
	out := make([]Address, 0, len(ss))
	for _, s := range ss {
		out = append(out, addr(t, s))
	}
	return out
}

// summary is "address:original>bound" per binding, for compact comparisons.
func summary(p *Plan) string {
	var parts []string
	for _, b := range p.Bind {
		s := b.Address.String() + ":" + b.OriginalDriver
		if b.AlreadyBound {
			s += "(bound)"
		}
		parts = append(parts, s)
	}
	for _, d := range p.Stay {
		parts = append(parts, d.Address.String()+":stays-"+d.Driver)
	}
	return strings.Join(parts, " ")
}

func TestPlanBinding(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		host   string
		target string
		opts   Options
		want   string // summary of the plan
		group  int
	}{
		{
			name: "GPU and HDMI audio: the whole group by default", host: "workstation", target: "0000:01:00.0",
			want: "0000:01:00.0:nvidia 0000:01:00.1:snd_hda_intel", group: 13,
		},
		{
			name: "naming the audio function binds the same group", host: "workstation", target: "0000:01:00.1",
			want: "0000:01:00.0:nvidia 0000:01:00.1:snd_hda_intel", group: 13,
		},
		{
			name: "explicit list covering the group", host: "workstation", target: "0000:01:00.0",
			opts: Options{Functions: addrs(t, "0000:01:00.1", "0000:01:00.0")},
			want: "0000:01:00.0:nvidia 0000:01:00.1:snd_hda_intel", group: 13,
		},
		{
			name: "bridge in the group, allowed: the bridge keeps its driver", host: "bmc-bridge", target: "0000:03:00.0",
			opts: Options{AllowOtherClasses: true},
			want: "0000:03:00.0:ast 0000:02:00.0:stays-", group: 21,
		},
		{
			name: "storage in the group, allowed", host: "chipset-slot", target: "0000:03:00.0",
			opts: Options{AllowOtherClasses: true},
			want: "0000:03:00.0:amdgpu 0000:03:00.1:snd_hda_intel 0000:04:00.0:ahci 0000:00:1c.0:stays-pcieport", group: 11,
		},
		{
			name: "nested host stand-in: VGA + ich9-intel-hda", host: "nested-l1", target: "0000:03:00.0",
			want: "0000:03:00.0:bochs-drm 0000:03:00.1:snd_hda_intel", group: 9,
		},
		{
			name: "nested host edu device: no driver to remember", host: "nested-l1", target: "0000:02:00.0",
			want: "0000:02:00.0:", group: 8,
		},
		{
			name: "nested host NIC alone in its group, allowed", host: "nested-l1", target: "0000:01:00.0",
			opts: Options{AllowOtherClasses: true},
			want: "0000:01:00.0:e1000e", group: 7,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := PlanBinding(loadHost(t, c.host), addr(t, c.target), c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(p); got != c.want {
				t.Errorf("plan\n got %s\nwant %s", got, c.want)
			}
			if p.Group != c.group {
				t.Errorf("group %d, want %d", p.Group, c.group)
			}
		})
	}
}

func TestPlanBindingAlreadyBound(t *testing.T) {
	t.Parallel()
	// The nested host's pair after a bind: both functions on vfio-pci, the
	// rest of the host as captured before.
	base := loadHost(t, "nested-l1")
	bound := loadHost(t, "nested-l1-bound")
	var devices []*Device
	for _, d := range base.Devices() {
		if b := bound.Lookup(d.Address); b != nil {
			d = b
		}
		devices = append(devices, d)
	}
	inv, err := NewInventory(devices)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanBinding(inv, addr(t, "0000:03:00.1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(p), "0000:03:00.0:(bound) 0000:03:00.1:(bound)"; got != want {
		t.Errorf("plan %s, want %s", got, want)
	}
}

func TestPlanBindingRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		host   string
		target string
		opts   Options
		as     any      // pointer to the error type expected
		want   []string // substrings of the message
	}{
		{
			name: "partial group: only the VGA function of GPU + audio", host: "workstation", target: "0000:01:00.0",
			opts: Options{Functions: addrs(t, "0000:01:00.0")},
			as:   new(*PartialGroupError),
			want: []string{"IOMMU group 13 of 0000:01:00.0", "leaves out 0000:01:00.1", "Add 0000:01:00.1 to functions", "must move to vfio-pci together", "Audio device"},
		},
		{
			name: "partial group on the nested stand-in", host: "nested-l1", target: "0000:03:00.0",
			opts: Options{Functions: addrs(t, "0000:03:00.0")},
			as:   new(*PartialGroupError),
			want: []string{"IOMMU group 9", "leaves out 0000:03:00.1"},
		},
		{
			name: "explicit function outside the group", host: "workstation", target: "0000:01:00.0",
			opts: Options{Functions: addrs(t, "0000:01:00.0", "0000:01:00.1", "0000:02:00.0")},
			as:   new(*NotInGroupError),
			want: []string{"0000:02:00.0, which is not in IOMMU group 13", "0000:01:00.0, 0000:01:00.1"},
		},
		{
			name: "group with a bridge, not allowed", host: "bmc-bridge", target: "0000:03:00.0",
			as:   new(*OtherClassError),
			want: []string{"IOMMU group 21", "0000:02:00.0 (PCI bridge", "[bridge]", "allow_other_classes = true"},
		},
		{
			name: "group with storage, not allowed", host: "chipset-slot", target: "0000:03:00.1",
			as:   new(*OtherClassError),
			want: []string{"0000:04:00.0 (SATA controller, ASMedia Technology Inc. ASM1062 Serial ATA Controller, driver ahci) [storage]", "0000:00:1c.0", "[bridge]"},
		},
		{
			name: "NIC, not allowed", host: "nested-l1", target: "0000:01:00.0",
			as:   new(*OtherClassError),
			want: []string{"Ethernet controller", "[network]"},
		},
		{
			name: "no IOMMU", host: "no-iommu", target: "0000:01:00.0",
			as:   new(*NoIOMMUError),
			want: []string{"no usable IOMMU", "intel_iommu=on", "amd_iommu=on"},
		},
		{
			name: "unknown address", host: "workstation", target: "0000:09:00.0",
			as:   new(*UnknownDeviceError),
			want: []string{"no PCI function 0000:09:00.0", "0000:01:00.0 (VGA compatible controller, NVIDIA Corporation GA102 [GeForce RTX 3090], driver nvidia)"},
		},
		{
			name: "a bridge itself", host: "bmc-bridge", target: "0000:02:00.0",
			want: []string{"bridges cannot be bound"},
		},
		{
			name: "explicit list naming a bridge", host: "bmc-bridge", target: "0000:03:00.0",
			opts: Options{Functions: addrs(t, "0000:03:00.0", "0000:02:00.0"), AllowOtherClasses: true},
			want: []string{"bridges are never bound", "remove it from functions"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := PlanBinding(loadHost(t, c.host), addr(t, c.target), c.opts)
			if err == nil {
				t.Fatalf("planned %s, want an error", summary(p))
			}
			if c.as != nil && !errors.As(err, c.as) {
				t.Errorf("error is %T, want %T: %v", err, c.as, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestCheckNotInUse(t *testing.T) {
	t.Parallel()
	fns := addrs(t, "0000:01:00.0", "0000:01:00.1")
	if err := CheckNotInUse(fns, map[Address][]string{addr(t, "0000:02:00.0"): {"other"}}); err != nil {
		t.Errorf("unrelated use refused: %v", err)
	}
	err := CheckNotInUse(fns, map[Address][]string{addr(t, "0000:01:00.1"): {"vm-b", "vm-a"}})
	var inUse *InUseError
	if !errors.As(err, &inUse) || !strings.Contains(err.Error(), "0000:01:00.1 by vm-a, vm-b") {
		t.Errorf("got %v", err)
	}
}
