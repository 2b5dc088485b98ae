package provider

import (
	"context"
	"testing"

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
// or back) changes only the state; any other disk change replaces the VM.
func TestDiskRequiresReplace(t *testing.T) {
	byName := vmDiskModel{BasePool: str("images"), BaseVolume: str("debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}
	cases := []struct {
		name    string
		state   vmDiskModel
		plan    vmDiskModel
		replace bool
	}{
		{"name to id", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, false},
		{"id of a hosts map host to name", vmDiskModel{Image: str("gpu2/images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, byName, false},
		{"another image", byName, vmDiskModel{Image: str("images/ubuntu.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, true},
		{"the same image in another pool", byName, vmDiskModel{Image: str("default/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(20)}, true},
		{"another size", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("default"), SizeGiB: types.Int64Value(40)}, true},
		{"another overlay pool", byName, vmDiskModel{Image: str("images/debian.qcow2"), Pool: str("fast"), SizeGiB: types.Int64Value(20)}, true},
		{"an existing volume instead", byName, vmDiskModel{Volume: str("debian.qcow2"), Pool: str("images")}, true},
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
			if resp.Diagnostics.HasError() {
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
