package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// A VM with no disk and no kernel boots only from a CD-ROM or the network:
// libvirt defines it, and domains other tools made are so (an adopted
// domain's configuration must plan), so it is a warning on disk, not an
// error; one with a kernel gets none.
func TestVMWithNothingToBootWarns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var sr resource.SchemaResponse
	(&vmResource{}).Schema(ctx, resource.SchemaRequest{}, &sr)
	typ := sr.Schema.Type().TerraformType(ctx).(tftypes.Object)
	config := func(set map[string]tftypes.Value) tfsdk.Config {
		vals := map[string]tftypes.Value{}
		for k, at := range typ.AttributeTypes {
			vals[k] = tftypes.NewValue(at, nil)
		}
		for k, v := range set {
			vals[k] = v
		}
		return tfsdk.Config{Schema: sr.Schema, Raw: tftypes.NewValue(typ, vals)}
	}
	name := tftypes.NewValue(tftypes.String, "cdrom-only")
	var resp resource.ValidateConfigResponse
	(&vmResource{}).ValidateConfig(ctx, resource.ValidateConfigRequest{Config: config(map[string]tftypes.Value{"name": name})}, &resp)
	if resp.Diagnostics.HasError() || resp.Diagnostics.WarningsCount() != 1 ||
		!strings.Contains(resp.Diagnostics.Warnings()[0].Detail(), "only from a CD-ROM or the network") {
		t.Errorf("no disk and no kernel: %v, want one warning and no error", resp.Diagnostics)
	}
	resp = resource.ValidateConfigResponse{}
	(&vmResource{}).ValidateConfig(ctx, resource.ValidateConfigRequest{Config: config(map[string]tftypes.Value{"name": name,
		"kernel": tftypes.NewValue(tftypes.String, "/boot/vmlinuz"), "initrd": tftypes.NewValue(tftypes.String, "/boot/initrd.img")})}, &resp)
	if len(resp.Diagnostics) != 0 {
		t.Errorf("kernel boot: %v, want nothing", resp.Diagnostics)
	}
}
