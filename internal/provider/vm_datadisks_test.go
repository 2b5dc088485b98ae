package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func dataDiskList(t *testing.T, disks ...vmDataDiskModel) types.List {
	t.Helper()
	var elems []attr.Value
	for _, d := range disks {
		v, diags := types.ObjectValueFrom(context.Background(), vmDataDiskAttrTypes, d)
		if diags.HasError() {
			t.Fatal(diags)
		}
		elems = append(elems, v)
	}
	return types.ListValueMust(types.ObjectType{AttrTypes: vmDataDiskAttrTypes}, elems)
}

func newDataDisk(name string, size int64, keep bool) vmDataDiskModel {
	return vmDataDiskModel{Name: str(name), SizeGiB: types.Int64Value(size), Volume: types.StringNull(), Pool: str("default"),
		Format: str("qcow2"), Keep: types.BoolValue(keep), Serial: types.StringNull()}
}

// The plan warns when a data disk's volume would be deleted (a new, not
// kept, disk removed), says nothing for kept and existing ones, and refuses
// changing a disk in place.
func TestPlanDataDisks(t *testing.T) {
	scratch, kept := newDataDisk("scratch", 10, false), newDataDisk("kept", 10, true)
	existingVol := vmDataDiskModel{Name: str("dataset"), SizeGiB: types.Int64Null(), Volume: str("dataset.raw"), Pool: str("data"),
		Format: str("raw"), Keep: types.BoolValue(false), Serial: types.StringNull()}
	state := &vmModel{Name: str("web-1"), DataDisks: dataDiskList(t, scratch, kept, existingVol)}

	var diags diag.Diagnostics
	planDataDisks(context.Background(), &vmModel{DataDisks: dataDiskList(t)}, state, &diags)
	if diags.HasError() || diags.WarningsCount() != 1 {
		t.Fatalf("removing all three: %v, want one warning", diags)
	}
	w := diags.Warnings()[0]
	if w.Summary() != "Data disk volume will be deleted" || !strings.Contains(w.Detail(), "default/web-1-scratch.qcow2") {
		t.Errorf("warning %q: %s", w.Summary(), w.Detail())
	}

	diags = nil
	keepNow := scratch
	keepNow.Keep = types.BoolValue(true)
	planDataDisks(context.Background(), &vmModel{DataDisks: dataDiskList(t, keepNow, kept, existingVol)}, state, &diags)
	if len(diags) != 0 {
		t.Errorf("keeping a disk: %v", diags)
	}

	diags = nil
	bigger := scratch
	bigger.SizeGiB = types.Int64Value(20)
	planDataDisks(context.Background(), &vmModel{DataDisks: dataDiskList(t, bigger, kept, existingVol)}, state, &diags)
	if !diags.HasError() || diags.Errors()[0].Summary() != "Data disk cannot change in place" {
		t.Errorf("resizing a data disk: %v", diags)
	}
}
