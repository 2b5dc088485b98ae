package provider

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// fakeSizer sizes each function it is given as an H100 80GB (BARs of
// 128 GiB and 32 MiB, 64-bit prefetchable), and counts its calls.
type fakeSizer struct {
	calls int
	err   error
}

func (f *fakeSizer) size(_ context.Context, gpus, hostdevs []string) (vfio.Window, error) {
	f.calls++
	if f.err != nil {
		return vfio.Window{}, f.err
	}
	bars := map[vfio.Address][]vfio.BAR{}
	for i := range append(gpus, hostdevs...) {
		bars[vfio.Address{Bus: uint8(i + 1)}] = []vfio.BAR{
			{Index: 1, Size: 128 << 30, Is64: true, Prefetchable: true},
			{Index: 3, Size: 32 << 20, Is64: true, Prefetchable: true},
		}
	}
	return vfio.MMIOWindow(bars), nil
}

func mmioModel(gib types.Int64, gpus ...string) *vmModel {
	elems := []attr.Value{}
	for _, g := range gpus {
		elems = append(elems, types.StringValue(g))
	}
	return &vmModel{
		Host:         types.StringNull(),
		GPUs:         types.SetValueMust(types.StringType, elems),
		Hostdevs:     types.SetNull(types.StringType),
		PCIMMIO64GiB: gib,
	}
}

func TestPlanMMIO(t *testing.T) {
	ctx := context.Background()
	unset := types.Int64Null()
	for _, tc := range []struct {
		name   string
		config *vmModel
		state  *vmModel
		nilFn  bool // the host's files cannot be read
		err    error
		want   types.Int64
		calls  int
		errAt  string
	}{
		{name: "one H100, unset: sized at plan", config: mmioModel(unset, "0000:c1:00.0"), want: types.Int64Value(256), calls: 1},
		{name: "two H100s, unset", config: mmioModel(unset, "0000:1b:00.0", "0000:9a:00.0"), want: types.Int64Value(512), calls: 1},
		{name: "nothing passed through", config: mmioModel(unset), want: types.Int64Null()},
		{name: "unchanged since state: kept, not read", config: mmioModel(unset, "0000:c1:00.0"),
			state: mmioModel(types.Int64Value(256), "0000:c1:00.0"), want: types.Int64Value(256)},
		{name: "a GPU added: sized again", config: mmioModel(unset, "0000:1b:00.0", "0000:9a:00.0"),
			state: mmioModel(types.Int64Value(256), "0000:1b:00.0"), want: types.Int64Value(512), calls: 1},
		{name: "tcp/tls host: null", config: mmioModel(unset, "0000:c1:00.0"), nilFn: true, want: types.Int64Null()},
		{name: "read fails: known after apply", config: mmioModel(unset, "0000:c1:00.0"), err: errors.New("host down"),
			want: types.Int64Unknown(), calls: 1},
		{name: "explicit and large enough", config: mmioModel(types.Int64Value(129), "0000:c1:00.0"), want: types.Int64Value(129), calls: 1},
		{name: "explicit 128 for an H100: refused", config: mmioModel(types.Int64Value(128), "0000:c1:00.0"),
			want: types.Int64Value(128), calls: 1, errAt: "at least 129 GiB"},
		{name: "explicit, host unreadable: taken as is", config: mmioModel(types.Int64Value(8), "0000:c1:00.0"), nilFn: true, want: types.Int64Value(8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSizer{err: tc.err}
			plan := *tc.config
			if plan.PCIMMIO64GiB.IsNull() {
				plan.PCIMMIO64GiB = types.Int64Unknown() // as the framework plans a computed attribute
			}
			var diags diag.Diagnostics
			size := mmioSizer(f.size)
			if tc.nilFn {
				size = nil
			}
			planMMIOWith(ctx, &plan, tc.config, tc.state, size, &diags)
			if !plan.PCIMMIO64GiB.Equal(tc.want) {
				t.Errorf("planned %v, want %v", plan.PCIMMIO64GiB, tc.want)
			}
			if f.calls != tc.calls {
				t.Errorf("the host was read %d times, want %d", f.calls, tc.calls)
			}
			switch {
			case tc.errAt == "" && diags.HasError():
				t.Errorf("unexpected error: %v", diags)
			case tc.errAt != "":
				if len(diags.Errors()) != 1 {
					t.Fatalf("want one error, got %v", diags)
				}
				d := diags.Errors()[0]
				wd, ok := d.(diag.DiagnosticWithPath)
				if !ok || !wd.Path().Equal(path.Root("pci_mmio64_gib")) || !strings.Contains(d.Detail(), tc.errAt) || !strings.Contains(d.Detail(), "set 256") {
					t.Errorf("error %q at %v; want it on pci_mmio64_gib saying %q and set 256", d.Detail(), wd, tc.errAt)
				}
			}
		})
	}
}
