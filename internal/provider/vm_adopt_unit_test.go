package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// What a configuration leaves unset plans the value the domain has (an
// imported domain's own), and a new VM's default only where there is none.
func TestPlanDomainDefaultsKeepsTheDomainsValues(t *testing.T) {
	t.Parallel()
	imported := &vmModel{
		Name: types.StringValue("web-1"), Type: types.StringValue("qemu"),
		Machine: types.StringValue("pc"), Firmware: types.StringValue("uefi"),
		CPUMode: types.StringValue("custom"), GuestAgent: types.BoolValue(false),
		SerialLogPath: types.StringValue(""),
	}
	unset := func() vmModel {
		return vmModel{
			Name: types.StringValue("web-1"), Type: types.StringUnknown(), Machine: types.StringUnknown(),
			Firmware: types.StringUnknown(), CPUMode: types.StringNull(), GuestAgent: types.BoolUnknown(),
			SerialLogPath: types.StringNull(),
		}
	}
	// config is what the configuration says: all of these unset.
	nullConfig := func() vmModel {
		return vmModel{
			Name: types.StringValue("web-1"), Type: types.StringNull(), Machine: types.StringNull(),
			Firmware: types.StringNull(), CPUMode: types.StringNull(), GuestAgent: types.BoolNull(),
			SerialLogPath: types.StringNull(),
		}
	}

	// After an import: the plan modifiers have put the state's values back
	// for type, machine, firmware and guest_agent.
	plan, config := unset(), nullConfig()
	plan.Type, plan.Machine, plan.Firmware, plan.GuestAgent = imported.Type, imported.Machine, imported.Firmware, imported.GuestAgent
	planDomainDefaults(&plan, &config, imported)
	if plan.CPUMode.ValueString() != "custom" || plan.SerialLogPath.ValueString() != "" || plan.SerialLogPath.IsNull() {
		t.Errorf("imported domain plans cpu_mode %s and serial_log_path %s, want its own custom and \"\"", plan.CPUMode, plan.SerialLogPath)
	}
	if plan.GuestAgent.ValueBool() || plan.Machine.ValueString() != "pc" {
		t.Errorf("imported domain plans guest_agent %s, machine %s", plan.GuestAgent, plan.Machine)
	}

	// A type change makes the domain's CPU mode moot: the new type's default.
	plan, config = unset(), nullConfig()
	plan.Type = types.StringValue("kvm")
	planDomainDefaults(&plan, &config, imported)
	if got := plan.CPUMode.ValueString(); got != string(domain.CPUHostPassthrough) {
		t.Errorf("type change plans cpu_mode %q, want the kvm default", got)
	}

	// A new VM gets the defaults.
	plan, config = unset(), nullConfig()
	planDomainDefaults(&plan, &config, nil)
	for name, got := range map[string]string{
		"type": plan.Type.ValueString(), "machine": plan.Machine.ValueString(), "firmware": plan.Firmware.ValueString(),
		"cpu_mode": plan.CPUMode.ValueString(), "serial_log_path": plan.SerialLogPath.ValueString(),
	} {
		want := map[string]string{
			"type": "kvm", "machine": "q35", "firmware": "bios", "cpu_mode": "host-passthrough",
			"serial_log_path": domain.DefaultSerialLogPath("web-1"),
		}[name]
		if got != want {
			t.Errorf("new VM plans %s %q, want %q", name, got, want)
		}
	}
	if !plan.GuestAgent.ValueBool() {
		t.Error("new VM plans no guest agent")
	}

	// A value the configuration gives but is not known yet stays unknown.
	plan, config = unset(), nullConfig()
	config.Machine = types.StringUnknown()
	planDomainDefaults(&plan, &config, nil)
	if !plan.Machine.IsUnknown() {
		t.Errorf("a machine known only at apply plans %s", plan.Machine)
	}
}

// The first refresh after an import names what Kohaku keeps but does not
// manage, and says how to bring a disk outside every pool under one.
func TestAdoptionWarnings(t *testing.T) {
	t.Parallel()
	view := &vmlife.View{
		Observed:         domain.Observed{Spec: domain.Spec{Name: "web-1"}, Unrecognized: []string{"graphics vnc", "disk vdb"}},
		DiskOutsidePools: "/srv/vm/web-1.qcow2",
	}
	var diags diag.Diagnostics
	addAdoptionWarnings(&diags, view)
	if diags.HasError() || diags.WarningsCount() != 2 {
		t.Fatalf("diagnostics %v, want two warnings", diags)
	}
	all := diags[0].Detail() + diags[1].Detail()
	for _, want := range []string{"graphics vnc", "disk vdb", "virsh pool-define-as NAME dir --target /srv/vm", `volume = "web-1.qcow2"`} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings do not say %q:\n%s", want, all)
		}
	}
	diags = nil
	addAdoptionWarnings(&diags, &vmlife.View{Observed: domain.Observed{Spec: domain.Spec{Name: "made"}}})
	if len(diags) != 0 {
		t.Errorf("a domain with nothing unmanaged warns: %v", diags)
	}
}

// An adopted domain that autostarts keeps autostarting when the
// configuration leaves autostart unset: the schema keeps the imported
// state's value (no static default would plan it off), and only a new VM
// gets false. A configured value always wins.
func TestPlanAutostartKeepsTheDomainsOwn(t *testing.T) {
	t.Parallel()
	var sr resource.SchemaResponse
	(&vmResource{}).Schema(context.Background(), resource.SchemaRequest{}, &sr)
	a, ok := sr.Schema.Attributes["autostart"].(schema.BoolAttribute)
	if !ok {
		t.Fatalf("autostart is %T, want a bool attribute", sr.Schema.Attributes["autostart"])
	}
	if a.Default != nil {
		t.Error("autostart has a static default, which plans an imported domain's autostart off")
	}
	if len(a.PlanModifiers) == 0 {
		t.Error("autostart has no plan modifier to keep the state's value")
	}

	cases := []struct {
		name         string
		state        *vmModel
		plan, config types.Bool
		want         bool
	}{
		// UseStateForUnknown has put the imported state's true in the plan.
		{"imported, unset", &vmModel{Autostart: types.BoolValue(true)}, types.BoolValue(true), types.BoolNull(), true},
		{"imported, turned off", &vmModel{Autostart: types.BoolValue(true)}, types.BoolValue(false), types.BoolValue(false), false},
		{"new VM, unset", nil, types.BoolUnknown(), types.BoolNull(), false},
		{"new VM, on", nil, types.BoolValue(true), types.BoolValue(true), true},
	}
	for _, c := range cases {
		plan := vmModel{Name: types.StringValue("web-1"), Autostart: c.plan, Type: types.StringValue("kvm"),
			Machine: types.StringValue("q35"), Firmware: types.StringValue("bios"), GuestAgent: types.BoolValue(true)}
		config := vmModel{Name: types.StringValue("web-1"), Autostart: c.config}
		planDomainDefaults(&plan, &config, c.state)
		if plan.Autostart.IsUnknown() || plan.Autostart.ValueBool() != c.want {
			t.Errorf("%s: plans autostart %s, want %t", c.name, plan.Autostart, c.want)
		}
	}
}
