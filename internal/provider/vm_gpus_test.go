package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// fixtureHost serves the node-device XML of internal/vfio/testdata/<host>,
// with some functions' drivers replaced (as if a binding had moved them),
// and counts the reads, as libvirt would answer NodeDeviceXML.
type fixtureHost struct {
	t       *testing.T
	dir     string
	drivers map[string]string // address -> driver name, "" for none
	hidden  string            // an address libvirt does not show
	reads   map[string]int
}

func newFixtureHost(t *testing.T, host string, drivers map[string]string) *fixtureHost {
	return &fixtureHost{t: t, dir: filepath.Join("..", "vfio", "testdata", host), drivers: drivers, reads: map[string]int{}}
}

func (h *fixtureHost) read(_ context.Context, a vfio.Address) (*vfio.Device, error) {
	h.reads[a.String()]++
	b, err := os.ReadFile(filepath.Join(h.dir, vfio.NodeDeviceName(a)+".xml"))
	if a.String() == h.hidden {
		err = os.ErrNotExist
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node device %s %w", vfio.NodeDeviceName(a), hosts.ErrNotFound)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	d, err := vfio.ParseDevice(string(b))
	if err != nil {
		h.t.Fatal(err)
	}
	if drv, ok := h.drivers[a.String()]; ok {
		d.Driver = drv
	}
	return d, nil
}

func (h *fixtureHost) totalReads() int {
	n := 0
	for a, c := range h.reads {
		if c > 1 {
			h.t.Errorf("%s was read %d times, want once", a, c)
		}
		n += c
	}
	return n
}

func vfioDrivers(addrs ...string) map[string]string {
	m := map[string]string{}
	for _, a := range addrs {
		m[a] = vfio.DriverVFIO
	}
	return m
}

func TestExpandGPUs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		host    string
		drivers map[string]string
		hidden  string
		entries []string
		want    gpuGroups
		reads   int
		warn    []string // substrings of the one warning expected, in order
		err     []string // substrings of the error, in order
	}{
		{
			name: "VGA and HDMI audio bound by a binding: both", host: "nested-l1-bound",
			entries: []string{"0000:03:00.0"},
			want:    gpuGroups{"0000:03:00.0": {"0000:03:00.0", "0000:03:00.1"}},
			reads:   2,
		},
		{
			name: "a binding on a named host, named by its audio function", host: "nested-l1-bound",
			entries: []string{"gpu2/0000:03:00.1"},
			want:    gpuGroups{"0000:03:00.1": {"0000:03:00.0", "0000:03:00.1"}},
			reads:   2,
		},
		{
			name: "two entries of one group: each function read once", host: "nested-l1-bound",
			entries: []string{"0000:03:00.1", "0000:03:00.0"},
			want: gpuGroups{
				"0000:03:00.0": {"0000:03:00.0", "0000:03:00.1"},
				"0000:03:00.1": {"0000:03:00.0", "0000:03:00.1"},
			},
			reads: 2,
		},
		{
			name: "bridge in the group stays out", host: "chipset-slot",
			drivers: vfioDrivers("0000:03:00.0", "0000:03:00.1", "0000:04:00.0"),
			entries: []string{"0000:03:00.0"},
			want:    gpuGroups{"0000:03:00.0": {"0000:03:00.0", "0000:03:00.1", "0000:04:00.0"}},
			reads:   4,
		},
		{
			name: "bridge without a driver stays out", host: "bmc-bridge",
			drivers: vfioDrivers("0000:03:00.0"),
			entries: []string{"0000:03:00.0"},
			want:    gpuGroups{"0000:03:00.0": {"0000:03:00.0"}},
			reads:   2,
		},
		{
			name: "a member given back to the host is left out, with a warning", host: "chipset-slot",
			drivers: vfioDrivers("0000:03:00.0", "0000:04:00.0"),
			entries: []string{"0000:03:00.0"},
			want:    gpuGroups{"0000:03:00.0": {"0000:03:00.0", "0000:04:00.0"}},
			reads:   4,
			warn:    []string{"0000:03:00.1 (Audio device", "IOMMU group 11 of 0000:03:00.0", "on snd_hda_intel, not vfio-pci"},
		},
		{
			name: "a device on its host driver is refused", host: "nested-l1",
			entries: []string{"0000:03:00.0"},
			reads:   1,
			err:     []string{`gpus entry "0000:03:00.0"`, "0000:03:00.0 (VGA compatible controller", "is on bochs-drm, not vfio-pci", "Bind it with kohaku_gpu_binding first"},
		},
		{
			name: "a device the host does not have is refused", host: "nested-l1-bound",
			entries: []string{"0000:7f:1f.7"},
			reads:   1,
			err:     []string{`gpus entry "0000:7f:1f.7"`, "the host has no PCI function 0000:7f:1f.7", "kohaku_gpu_binding"},
		},
		{
			name: "one bad entry refuses the list", host: "nested-l1-bound",
			entries: []string{"0000:03:00.0", "0000:ff:00.0"},
			reads:   3,
			err:     []string{`gpus entry "0000:ff:00.0"`, "no PCI function 0000:ff:00.0"},
		},
		{
			name: "a group member libvirt does not show is an error", host: "nested-l1-bound",
			hidden:  "0000:03:00.1",
			entries: []string{"0000:03:00.0"},
			reads:   2,
			err:     []string{`gpus entry "0000:03:00.0"`, "IOMMU group 9 of 0000:03:00.0 lists 0000:03:00.1", "iommu_groups/9"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newFixtureHost(t, c.host, c.drivers)
			h.hidden = c.hidden
			got, warnings, err := vmlife.ExpandGPUs(context.Background(), c.entries, h.read)
			if n := h.totalReads(); n != c.reads {
				t.Errorf("%d node-device reads, want %d (%v)", n, c.reads, h.reads)
			}
			if len(c.err) > 0 {
				if err == nil {
					t.Fatalf("no error; got %v", got)
				}
				var ee *vmlife.GPUEntryError
				if !errors.As(err, &ee) {
					t.Errorf("error %T is not a gpuEntryError", err)
				}
				expectInOrder(t, err.Error(), c.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("groups %v, want %v", got, c.want)
			}
			if len(c.warn) == 0 && len(warnings) > 0 {
				t.Errorf("unexpected warnings: %q", warnings)
			}
			if len(c.warn) > 0 {
				if len(warnings) != 1 {
					t.Fatalf("warnings %q, want one", warnings)
				}
				expectInOrder(t, warnings[0], c.warn)
			}
		})
	}
}

func expectInOrder(t *testing.T, s string, parts []string) {
	t.Helper()
	rest := s
	for _, p := range parts {
		i := strings.Index(rest, p)
		if i < 0 {
			t.Errorf("%q does not contain %q (in order)", s, p)
			return
		}
		rest = rest[i+len(p):]
	}
}

func TestGPUGroupsHostdevs(t *testing.T) {
	t.Parallel()
	g := gpuGroups{
		"0000:03:00.0": {"0000:03:00.0", "0000:03:00.1"},
		"0000:01:00.0": {"0000:01:00.0"},
	}
	// The spec lists each gpus entry's own address and the raw hostdevs,
	// as written; the old workaround also lists the audio function.
	got := g.Hostdevs([]string{"0000:03:00.0", "0000:FF:1F.7", "0000:03:00.1", "0000:01:00.0"})
	want := []string{"0000:01:00.0", "0000:03:00.0", "0000:03:00.1", "0000:ff:1f.7"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	// The domain package builds and checks it: each address once.
	if err := domain.Validate(domain.Spec{Name: "x", Type: domain.TypeQEMU, VCPU: 1, MemoryMiB: 128, Kernel: "/k", Initrd: "/i", Hostdevs: got}); err != nil {
		t.Errorf("domain refuses the expanded hostdevs: %v", err)
	}
	if got := (gpuGroups{}).Hostdevs(nil); len(got) != 0 {
		t.Errorf("nothing expands to %q", got)
	}
	// The private record round-trips; no record is no key.
	back := gpuGroupsFromPrivate(privateGroups(g))
	if !reflect.DeepEqual(back, g) {
		t.Errorf("private record %s reads back as %v", privateGroups(g), back)
	}
	if b := privateGroups(gpuGroups{}); b != nil {
		t.Errorf("empty groups store %q", b)
	}
	if got := gpuGroupsFromPrivate([]byte("not json")); len(got) != 0 {
		t.Errorf("a broken record reads as %v", got)
	}
}

func TestAttributeHostdevs(t *testing.T) {
	t.Parallel()
	pair := gpuGroups{"0000:03:00.0": {"0000:03:00.0", "0000:03:00.1"}}
	both := []string{"0000:03:00.0", "0000:03:00.1"}
	cases := []struct {
		name              string
		observed          []string
		priorGPUs, prior  []string
		groups            gpuGroups
		wantGPUs, wantRaw []string
	}{
		{
			name: "after create: the group is the gpus entry", observed: both,
			priorGPUs: []string{"0000:03:00.0"}, groups: pair,
			wantGPUs: []string{"0000:03:00.0"},
		},
		{
			name: "a binding on a named host", observed: both,
			priorGPUs: []string{"gpu2/0000:03:00.0"}, groups: pair,
			wantGPUs: []string{"gpu2/0000:03:00.0"},
		},
		{
			name: "after import: every device is a hostdev", observed: both,
			wantRaw: both,
		},
		{
			name: "no record (state of an older version): the entry's own function only", observed: both,
			priorGPUs: []string{"0000:03:00.0"}, groups: gpuGroups{},
			wantGPUs: []string{"0000:03:00.0"}, wantRaw: []string{"0000:03:00.1"},
		},
		{
			name: "the old workaround: hostdevs names the audio too, and keeps it", observed: both,
			priorGPUs: []string{"0000:03:00.0"}, prior: []string{"0000:03:00.1"}, groups: pair,
			wantGPUs: []string{"0000:03:00.0"}, wantRaw: []string{"0000:03:00.1"},
		},
		{
			name: "a function removed outside Terraform: the entry is missing, so the plan restores it", observed: []string{"0000:03:00.1"},
			priorGPUs: []string{"0000:03:00.0"}, groups: pair,
			wantRaw: []string{"0000:03:00.1"},
		},
		{
			name: "other hostdevs keep their spelling; unknown ones are reported", observed: []string{"0000:03:00.0", "0000:03:00.1", "0000:ff:1f.6", "0000:ff:1f.7"},
			priorGPUs: []string{"0000:03:00.0"}, prior: []string{"0000:FF:1F.7"}, groups: pair,
			wantGPUs: []string{"0000:03:00.0"}, wantRaw: []string{"0000:ff:1f.6", "0000:FF:1F.7"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gpus, raw := attributeHostdevs(c.observed, c.priorGPUs, c.prior, c.groups)
			if !reflect.DeepEqual(gpus, c.wantGPUs) || !reflect.DeepEqual(raw, c.wantRaw) {
				t.Errorf("gpus %q hostdevs %q, want %q %q", gpus, raw, c.wantGPUs, c.wantRaw)
			}
		})
	}
}

func strSet(vals ...string) types.Set {
	if vals == nil {
		return types.SetNull(types.StringType)
	}
	elems := make([]attr.Value, 0, len(vals))
	for _, v := range vals {
		elems = append(elems, types.StringValue(v))
	}
	return types.SetValueMust(types.StringType, elems)
}

// Refresh after create: the domain's two hostdevs come back as the one gpus
// entry and no hostdevs, so the plan is empty.
func TestFromDomainAttributesGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	view := &domainView{
		Status:    &hosts.DomainStatus{DomainRef: hosts.DomainRef{UUID: "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", Name: "gpu-vm"}},
		Observed:  domain.Observed{Spec: domain.Spec{Name: "gpu-vm", Hostdevs: []string{"0000:03:00.0", "0000:03:00.1"}}},
		GPUGroups: gpuGroups{"0000:03:00.0": {"0000:03:00.0", "0000:03:00.1"}},
	}
	prior := &vmModel{GPUs: strSet("0000:03:00.0"), Hostdevs: strSet()}
	var m vmModel
	var diags diag.Diagnostics
	m.fromDomain(ctx, view, prior, &diags)
	if diags.HasError() {
		t.Fatal(diags)
	}
	if !m.GPUs.Equal(strSet("0000:03:00.0")) {
		t.Errorf("gpus %s", m.GPUs)
	}
	if !m.Hostdevs.IsNull() {
		t.Errorf("hostdevs %s, want null as configured", m.Hostdevs)
	}
}

// Update redefines only when the expanded devices differ from the domain's:
// moving an imported VM's devices from hostdevs to gpus changes nothing.
func TestDefinitionChangedExpandsGPUs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := func(gpus, hostdevs types.Set) *vmModel {
		return &vmModel{
			Name: types.StringValue("gpu-vm"), Type: types.StringValue("qemu"),
			Kernel: types.StringValue("/vmlinuz"), Initrd: types.StringValue("/initrd.img"),
			GPUs: gpus, Hostdevs: hostdevs,
		}
	}
	observed := []string{"0000:03:00.0", "0000:03:00.1"}
	imported := base(strSet(), strSet(observed...))
	plan := base(strSet("0000:03:00.0"), strSet())
	var diags diag.Diagnostics
	definitionChanged := func(plan, state *vmModel, groups gpuGroups, observed []string, diags *diag.Diagnostics) bool {
		return vmlife.DefinitionChanged(plan.specFrom(ctx, diags).Spec, state.specFrom(ctx, diags).Spec, groups, observed)
	}
	pair := gpuGroups{"0000:03:00.0": observed}
	if definitionChanged(plan, imported, pair, observed, &diags) {
		t.Error("moving the group from hostdevs to gpus redefines the domain")
	}
	if !definitionChanged(plan, imported, gpuGroups{"0000:03:00.0": {"0000:03:00.0"}}, observed, &diags) {
		t.Error("a group that lost its audio function does not redefine the domain")
	}
	if !definitionChanged(plan, imported, pair, observed[:1], &diags) {
		t.Error("a domain missing the audio function is not redefined")
	}
	if diags.HasError() {
		t.Fatal(diags)
	}
}
