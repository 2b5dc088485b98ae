package provider

import (
	"context"
	"fmt"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

type gpuBindingModel struct {
	ID                  types.String   `tfsdk:"id"`
	Host                types.String   `tfsdk:"host"`
	Address             types.String   `tfsdk:"address"`
	Functions           types.Set      `tfsdk:"functions"`
	AllowOtherClasses   types.Bool     `tfsdk:"allow_other_classes"`
	NVIDIADriverVersion types.String   `tfsdk:"nvidia_driver_version"`
	IOMMUGroup          types.Int64    `tfsdk:"iommu_group"`
	FunctionDetails     types.List     `tfsdk:"function_details"`
	Timeouts            timeouts.Value `tfsdk:"timeouts"`
}

// gpuFunctionModel is one element of function_details.
type gpuFunctionModel struct {
	Address        types.String `tfsdk:"address"`
	Class          types.String `tfsdk:"class"`
	ClassName      types.String `tfsdk:"class_name"`
	VendorID       types.String `tfsdk:"vendor_id"`
	ProductID      types.String `tfsdk:"product_id"`
	OriginalDriver types.String `tfsdk:"original_driver"`
	CurrentDriver  types.String `tfsdk:"current_driver"`
}

var gpuFunctionAttrTypes = map[string]attr.Type{
	"address":         types.StringType,
	"class":           types.StringType,
	"class_name":      types.StringType,
	"vendor_id":       types.StringType,
	"product_id":      types.StringType,
	"original_driver": types.StringType,
	"current_driver":  types.StringType,
}

var gpuFunctionType = types.ObjectType{AttrTypes: gpuFunctionAttrTypes}

func pciAddressSet(addrs []vfio.Address) types.Set {
	vals := make([]attr.Value, 0, len(addrs))
	for _, a := range addrs {
		vals = append(vals, types.StringValue(a.String()))
	}
	return types.SetValueMust(types.StringType, vals)
}

func gpuFunctionDetails(ctx context.Context, l types.List, diags *diag.Diagnostics) []gpuFunctionModel {
	if l.IsNull() || l.IsUnknown() {
		return nil
	}
	var out []gpuFunctionModel
	diags.Append(l.ElementsAs(ctx, &out, false)...)
	return out
}

func gpuDetailsList(bound []gpubind.Bound) types.List {
	sort.Slice(bound, func(i, j int) bool { return bound[i].Address.Compare(bound[j].Address) < 0 })
	models := make([]gpuFunctionModel, 0, len(bound))
	for _, b := range bound {
		models = append(models, gpuFunctionModel{
			Address:        types.StringValue(b.Address.String()),
			Class:          types.StringValue(b.ClassHex()),
			ClassName:      types.StringValue(b.ClassName()),
			VendorID:       types.StringValue(fmt.Sprintf("%04x", b.VendorID)),
			ProductID:      types.StringValue(fmt.Sprintf("%04x", b.ProductID)),
			OriginalDriver: types.StringValue(b.Original),
			CurrentDriver:  types.StringValue(b.Driver),
		})
	}
	return gpuDetailsFromModels(models)
}

func gpuDetailsFromModels(models []gpuFunctionModel) types.List {
	vals := make([]attr.Value, 0, len(models))
	for _, m := range models {
		vals = append(vals, types.ObjectValueMust(gpuFunctionAttrTypes, map[string]attr.Value{
			"address":         m.Address,
			"class":           m.Class,
			"class_name":      m.ClassName,
			"vendor_id":       m.VendorID,
			"product_id":      m.ProductID,
			"original_driver": m.OriginalDriver,
			"current_driver":  m.CurrentDriver,
		}))
	}
	return types.ListValueMust(gpuFunctionType, vals)
}
