package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// powerConfig is an action config with the given attributes set, the rest null.
func powerConfig(t *testing.T, a *vmPowerAction, set map[string]tftypes.Value) tfsdk.Config {
	t.Helper()
	ctx := context.Background()
	var s action.SchemaResponse
	a.Schema(ctx, action.SchemaRequest{}, &s)
	typ := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		vals[name] = tftypes.NewValue(at, nil)
		if v, ok := set[name]; ok {
			vals[name] = v
		}
	}
	return tfsdk.Config{Schema: s.Schema, Raw: tftypes.NewValue(typ, vals)}
}

// force and wait_for_report are refused, on their own attribute, for the
// operations that do not take them.
func TestVMPowerActionValidateConfig(t *testing.T) {
	t.Parallel()
	str := func(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }
	yes := tftypes.NewValue(tftypes.Bool, true)
	cases := []struct {
		set  map[string]tftypes.Value
		want string // attribute path of the error; "" for none
	}{
		{map[string]tftypes.Value{"operation": str("shutdown"), "force": yes}, ""},
		{map[string]tftypes.Value{"operation": str("start"), "wait_for_report": yes}, ""},
		{map[string]tftypes.Value{"operation": str("reset"), "wait_for_report": yes}, ""},
		{map[string]tftypes.Value{"operation": str("reboot"), "wait_for_report": yes}, "wait_for_report"},
		{map[string]tftypes.Value{"operation": str("shutdown"), "wait_for_report": yes}, "wait_for_report"},
		{map[string]tftypes.Value{"operation": str("reboot"), "force": yes}, "force"},
		{map[string]tftypes.Value{"operation": str("start"), "force": yes}, "force"},
	}
	for _, c := range cases {
		a := &vmPowerAction{}
		c.set["vm"] = str("web")
		var resp action.ValidateConfigResponse
		a.ValidateConfig(context.Background(), action.ValidateConfigRequest{Config: powerConfig(t, a, c.set)}, &resp)
		switch {
		case c.want == "" && resp.Diagnostics.HasError():
			t.Errorf("%v: refused: %v", c.set, resp.Diagnostics)
		case c.want != "" && (!resp.Diagnostics.HasError() || !strings.Contains(diagPaths(resp), c.want)):
			t.Errorf("%v: want an error on %s, got %v", c.set, c.want, resp.Diagnostics)
		}
	}
}

// diagPaths lists the attribute paths the response's diagnostics are on.
func diagPaths(resp action.ValidateConfigResponse) string {
	var paths []string
	for _, d := range resp.Diagnostics {
		if wp, ok := d.(diag.DiagnosticWithPath); ok {
			paths = append(paths, wp.Path().String())
		}
	}
	return strings.Join(paths, ",")
}
