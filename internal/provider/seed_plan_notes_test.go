package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// seedPlanRequest builds kohaku_seed's config, plan and prior state from a
// few attribute values (the rest null); state nil plans a create.
func seedPlanRequest(t *testing.T, cfg, state map[string]tftypes.Value) resource.ModifyPlanRequest {
	t.Helper()
	ctx := context.Background()
	var sr resource.SchemaResponse
	(&seedResource{}).Schema(ctx, resource.SchemaRequest{}, &sr)
	typ := sr.Schema.Type().TerraformType(ctx).(tftypes.Object)
	object := func(set map[string]tftypes.Value) tftypes.Value {
		vals := map[string]tftypes.Value{}
		for k, at := range typ.AttributeTypes {
			vals[k] = tftypes.NewValue(at, nil)
		}
		for k, v := range set {
			vals[k] = v
		}
		return tftypes.NewValue(typ, vals)
	}
	req := resource.ModifyPlanRequest{
		Config: tfsdk.Config{Schema: sr.Schema, Raw: object(cfg)},
		Plan:   tfsdk.Plan{Schema: sr.Schema, Raw: object(cfg)},
		State:  tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(typ, nil)},
	}
	if state != nil {
		req.State.Raw = object(state)
	}
	return req
}

// wait_for = "auto" resolves to "none" for a seed with neither the
// first-boot reporter nor phone home: the seed's plan says so, once (when
// it is created or the settings change), on report_channel.
func TestSeedWarnsWhenAutoWaitsForNothing(t *testing.T) {
	t.Parallel()
	str := func(s string) tftypes.Value { return tftypes.NewValue(tftypes.String, s) }
	boolean := func(b bool) tftypes.Value { return tftypes.NewValue(tftypes.Bool, b) }
	quiet := map[string]tftypes.Value{"name": str("quiet-seed.iso"), "report_channel": boolean(false)}
	reporting := map[string]tftypes.Value{"name": str("quiet-seed.iso"), "report_channel": boolean(true)}
	cases := map[string]struct {
		cfg, state map[string]tftypes.Value
		warn       bool
	}{
		"new seed without a reporter":         {cfg: quiet, warn: true},
		"reporter turned off":                 {cfg: quiet, state: reporting, warn: true},
		"unchanged seed without a reporter":   {cfg: quiet, state: quiet},
		"new seed with the default reporter":  {cfg: map[string]tftypes.Value{"name": str("loud-seed.iso")}},
		"new seed with report_channel = true": {cfg: reporting},
		"reporter turned back on":             {cfg: reporting, state: quiet},
		"reporter off, guest agent on":        {cfg: map[string]tftypes.Value{"name": str("ga-seed.iso"), "report_channel": boolean(false), "guest_agent": boolean(true)}, warn: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := seedPlanRequest(t, tc.cfg, tc.state)
			resp := &resource.ModifyPlanResponse{Plan: req.Plan}
			(&seedResource{}).ModifyPlan(context.Background(), req, resp)
			if resp.Diagnostics.HasError() {
				t.Fatalf("plan failed: %v", resp.Diagnostics)
			}
			warnings := resp.Diagnostics.Warnings()
			if !tc.warn {
				if len(warnings) != 0 {
					t.Fatalf("warnings %v, want none", warnings)
				}
				return
			}
			if len(warnings) != 1 {
				t.Fatalf("warnings %v, want one", warnings)
			}
			w := warnings[0]
			if p, ok := w.(interface{ Path() path.Path }); !ok || !p.Path().Equal(path.Root("report_channel")) {
				t.Errorf("warning is not on report_channel: %v", w)
			}
			for _, want := range []string{`wait_for = "auto"`, "waits for nothing", `wait_for = "guest_agent"`, "report_channel = true"} {
				if !strings.Contains(w.Detail(), want) {
					t.Errorf("warning does not say %q:\n%s", want, w.Detail())
				}
			}
		})
	}
}
