package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func diskObject(t *testing.T, d vmDiskModel) types.Object {
	t.Helper()
	for _, v := range []*types.String{&d.Image, &d.BaseVolume, &d.BasePool, &d.Volume, &d.Pool} {
		if v.IsUnknown() || (!v.IsNull() && v.ValueString() == "") {
			*v = types.StringNull()
		}
	}
	o, diags := types.ObjectValueFrom(context.Background(), vmDiskAttrTypes, d)
	if diags.HasError() {
		t.Fatal(diags)
	}
	return o
}

func str(s string) types.String { return types.StringValue(s) }

// Naming the same base image another way (image for base_pool/base_volume,
// or back) changes only the state, a larger size grows the disk in place, a
// smaller one is refused on size_gib's own path; any other disk change
// replaces the VM.
func TestDiskRequiresReplace(t *testing.T) {
	byName := vmDiskModel{BasePool: str("images"), BaseVolume: str("debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}
	cases := []struct {
		name    string
		state   vmDiskModel
		plan    vmDiskModel
		replace bool
		// refused is the summary of the error planned, if any.
		refused string
	}{
		{"name to id", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, false, ""},
		{"id of a hosts map host to name", vmDiskModel{Image: str("gpu2/images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, byName, false, ""},
		{"another image", byName, vmDiskModel{Image: str("images/ubuntu.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, true, ""},
		{"the same image in another pool", byName, vmDiskModel{Image: str("default/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, true, ""},
		{"a larger size", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(40)}, false, ""},
		{"a size where there was none", vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Null()}, byName, false, ""},
		{"a smaller size", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(10)}, false, "Disk cannot shrink"},
		{"no size where there was one", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Null()}, true, ""},
		{"a size not known yet", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Unknown()}, true, ""},
		{"a larger size on another image", byName, vmDiskModel{Image: str("images/ubuntu.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(40)}, true, ""},
		{"another overlay pool", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("fast"), SizeGiB: types.Int64Value(20)}, true, ""},
		{"a larger existing volume", vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(20)}, vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(30)}, false, ""},
		{"a size for an existing volume", vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Null()}, vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(30)}, false, ""},
		{"a smaller existing volume", vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(20)}, vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(10)}, false, "Disk cannot shrink"},
		{"a larger size of another volume", vmDiskModel{Volume: str("web.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(20)}, vmDiskModel{Volume: str("db.qcow2"), Pool: str("images"), SizeGiB: types.Int64Value(30)}, true, ""},
		{"an existing volume instead", byName, vmDiskModel{Volume: str("debian.qcow2"), Pool: str("images")}, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, pl := diskObject(t, tc.state), diskObject(t, tc.plan)
			req := planmodifier.ObjectRequest{
				Path: path.Root("disk"), StateValue: st, PlanValue: pl, ConfigValue: pl,
				// Non-null state and plan: an update, not a create or destroy.
				State: tfsdk.State{Raw: tftypes.NewValue(tftypes.Object{}, map[string]tftypes.Value{})},
				Plan:  tfsdk.Plan{Raw: tftypes.NewValue(tftypes.Object{}, map[string]tftypes.Value{})},
			}
			resp := &planmodifier.ObjectResponse{PlanValue: pl}
			diskRequiresReplace().PlanModifyObject(context.Background(), req, resp)
			if tc.refused != "" {
				if !resp.Diagnostics.HasError() || resp.Diagnostics[0].Summary() != tc.refused {
					t.Fatalf("diagnostics %v, want the error %q", resp.Diagnostics, tc.refused)
				}
				var at path.Path
				if d, ok := resp.Diagnostics[0].(diag.DiagnosticWithPath); ok {
					at = d.Path()
				}
				if want := path.Root("disk").AtName("size_gib"); !at.Equal(want) {
					t.Errorf("error at %s, want %s", at, want)
				}
				for _, says := range []string{"lost", "-replace="} {
					if !strings.Contains(resp.Diagnostics[0].Detail(), says) {
						t.Errorf("refusal does not say %q: %s", says, resp.Diagnostics[0].Detail())
					}
				}
			} else if resp.Diagnostics.HasError() {
				t.Fatal(resp.Diagnostics)
			}
			if resp.RequiresReplace != tc.replace {
				t.Errorf("requires replace = %v, want %v", resp.RequiresReplace, tc.replace)
			}
		})
	}
}

// With image, the plan has no base_pool (the schema's default would name a
// pool the image may not be in); with base_volume it keeps it.
func TestImageDiskHasNoBasePool(t *testing.T) {
	withImage := vmDiskModel{Image: str("images/debian.qcow2"), BasePool: str("default"), Pool: str("default"), SizeGiB: types.Int64Null()}
	cfg := withImage
	cfg.BasePool = types.StringNull()
	resp := &planmodifier.ObjectResponse{PlanValue: diskObject(t, withImage)}
	imageDiskHasNoBasePool{}.PlanModifyObject(context.Background(), planmodifier.ObjectRequest{ConfigValue: diskObject(t, cfg), PlanValue: diskObject(t, withImage)}, resp)
	if got := resp.PlanValue.Attributes()["base_pool"]; !got.IsNull() {
		t.Errorf("base_pool planned %s with image, want null", got)
	}
	byName := vmDiskModel{BaseVolume: str("debian.qcow2"), BasePool: str("default"), Pool: str("default"), SizeGiB: types.Int64Null()}
	cfg = byName
	cfg.BasePool = types.StringNull()
	resp = &planmodifier.ObjectResponse{PlanValue: diskObject(t, byName)}
	imageDiskHasNoBasePool{}.PlanModifyObject(context.Background(), planmodifier.ObjectRequest{ConfigValue: diskObject(t, cfg), PlanValue: diskObject(t, byName)}, resp)
	if got := resp.PlanValue.Attributes()["base_pool"]; got.IsNull() {
		t.Errorf("base_pool planned null with base_volume, want the default")
	}
}
