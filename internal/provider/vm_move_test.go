package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func movableVM() *vmModel {
	return &vmModel{
		Host: types.StringNull(), HostChange: types.StringValue(hostChangeMove),
		Name: types.StringValue("web"), UUID: types.StringValue("6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"),
		Disk: types.ObjectValueMust(vmDiskAttrTypes, map[string]attr.Value{
			"image": types.StringNull(), "base_volume": types.StringValue("debian.qcow2"), "base_pool": types.StringValue("images"),
			"volume": types.StringNull(), "pool": types.StringValue("default"), "size_gib": types.Int64Value(8),
		}),
		DataDisks: types.ListValueMust(types.ObjectType{AttrTypes: vmDataDiskAttrTypes}, []attr.Value{
			types.ObjectValueMust(vmDataDiskAttrTypes, map[string]attr.Value{
				"name": types.StringValue("data"), "size_gib": types.Int64Value(1), "volume": types.StringNull(),
				"pool": types.StringValue("default"), "format": types.StringValue("qcow2"), "keep": types.BoolValue(false),
				"serial": types.StringValue("data"), "source": types.StringNull(),
			}),
		}),
		GPUs: types.SetNull(types.StringType), Hostdevs: types.SetNull(types.StringType),
		Mdevs: types.SetValueMust(types.StringType, nil), PlacedGPUs: types.ListNull(types.StringType),
	}
}

func TestMovingIsAHostChangeThatDoesNotReplace(t *testing.T) {
	t.Parallel()
	state := movableVM()
	plan := movableVM()
	if moving(plan, state) {
		t.Error("no host change is a move")
	}
	plan.Host = types.StringValue("nested")
	if !moving(plan, state) || moving(plan, nil) {
		t.Error("a host change with host_change = move is a move; a create is not")
	}
	plan.HostChange = types.StringValue(hostChangeReplace)
	if moving(plan, state) {
		t.Error("host_change = replace replaces rather than moves")
	}
	plan.HostChange, plan.Host = types.StringValue(hostChangeMove), types.StringUnknown()
	if moving(plan, state) {
		t.Error("an unknown host is not a move yet")
	}
}

func TestUnmovableNamesWhatAMoveCannotBring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var diags diag.Diagnostics
	if why := unmovable(ctx, movableVM(), &diags); len(why) > 0 || diags.HasError() {
		t.Fatalf("an overlay VM with a new data disk: %q %v", why, diags)
	}
	m := movableVM()
	m.Disk = types.ObjectValueMust(vmDiskAttrTypes, map[string]attr.Value{
		"image": types.StringNull(), "base_volume": types.StringNull(), "base_pool": types.StringNull(),
		"volume": types.StringValue("golden.qcow2"), "pool": types.StringValue("default"), "size_gib": types.Int64Null(),
	})
	m.DataDisks = types.ListValueMust(types.ObjectType{AttrTypes: vmDataDiskAttrTypes}, []attr.Value{
		types.ObjectValueMust(vmDataDiskAttrTypes, map[string]attr.Value{
			"name": types.StringValue("db"), "size_gib": types.Int64Null(), "volume": types.StringValue("db.qcow2"),
			"pool": types.StringValue("default"), "format": types.StringValue("qcow2"), "keep": types.BoolValue(false),
			"serial": types.StringValue("db"), "source": types.StringNull(),
		}),
	})
	m.GPUs = types.SetValueMust(types.StringType, []attr.Value{types.StringValue("h100")})
	m.Mdevs = types.SetValueMust(types.StringType, []attr.Value{types.StringValue("nvidia-1")})
	m.PlacedGPUs = types.ListValueMust(types.StringType, []attr.Value{types.StringValue("0000:01:00.0")})
	why := strings.Join(unmovable(ctx, m, &diags), "\n")
	for _, want := range []string{`disk.volume = "golden.qcow2"`, `data_disks volume = "db.qcow2"`, "gpus passed through", "mdevs passed through", "placed_gpus"} {
		if !strings.Contains(why, want) {
			t.Errorf("%q not named in:\n%s", want, why)
		}
	}
	if strings.Contains(why, "hostdevs") {
		t.Errorf("hostdevs named though there are none:\n%s", why)
	}
}

func TestLiveMoveRefusedAtPlan(t *testing.T) {
	t.Parallel()
	state, plan := movableVM(), movableVM()
	plan.Host, plan.HostChange = types.StringValue("nested"), types.StringValue(hostChangeLive)
	var diags diag.Diagnostics
	(&vmResource{}).planMove(context.Background(), plan, state, &diags)
	if !diags.HasError() || !strings.Contains(diags.Errors()[0].Detail(), "not available yet") {
		t.Fatalf("diags %v, want live refused", diags)
	}
	diags = nil
	plan.HostChange = types.StringValue(hostChangeMove)
	plan.GPUs = types.SetValueMust(types.StringType, []attr.Value{types.StringValue("h100")})
	// What the VM has now decides (GPUs the plan adds come on the new host).
	state.GPUs = plan.GPUs
	(&vmResource{}).planMove(context.Background(), plan, state, &diags)
	if !diags.HasError() || !strings.Contains(diags.Errors()[0].Detail(), "later step") {
		t.Fatalf("diags %v, want the GPU VM's move refused as a later step", diags)
	}
}
