package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// mmioValue is the pci_mmio64_gib Kohaku sets for a window: null (the
// firmware's default) when the BARs fit the default window.
func mmioValue(w vfio.Window) types.Int64 {
	if w.Fits() {
		return types.Int64Null()
	}
	return types.Int64Value(int64(w.GiB))
}

// passedThrough returns the VM's gpus (with the GPUs placement chose) and
// hostdevs, and whether they are all known.
func (m *vmModel) passedThrough() (gpus, hostdevs []string, known bool) {
	_, gu := stringSet(m.GPUs)
	hostdevs, hu := stringSet(m.Hostdevs)
	return m.gpuEntries(), hostdevs, !gu && !hu && !m.PlacedGPUs.IsUnknown()
}

// planMMIO plans pci_mmio64_gib. An explicit value is checked against the
// BARs where the host can be read, and refused on its own line when it
// cannot hold them. Unset, it is sized from the BARs: kept from state while
// the functions passed through are unchanged (no perpetual diff), null when
// nothing is passed through, read from the host when it can be, and
// otherwise left unknown for apply to size.
func (r *vmResource) planMMIO(ctx context.Context, plan, config, state *vmModel, diags *diag.Diagnostics) {
	planMMIOWith(ctx, plan, config, state, r.mmioSizer(plan), diags)
}

// mmioSizer sizes a VM's window from the BARs of what it passes through.
type mmioSizer func(ctx context.Context, gpus, hostdevs []string) (vfio.Window, error)

// mmioSizer is the sizer of the VM's host; nil when the host's files
// cannot be read.
func (r *vmResource) mmioSizer(m *vmModel) mmioSizer {
	if m.Host.IsUnknown() {
		return nil
	}
	c := r.hostForMMIO(m)
	if c == nil {
		return nil
	}
	return func(ctx context.Context, gpus, hostdevs []string) (vfio.Window, error) {
		return vmlife.SizeMMIO(ctx, c, gpus, hostdevs)
	}
}

func planMMIOWith(ctx context.Context, plan, config, state *vmModel, size mmioSizer, diags *diag.Diagnostics) {
	gpus, hostdevs, known := plan.passedThrough()
	explicit := !config.PCIMMIO64GiB.IsNull()
	if !explicit {
		switch {
		case known && len(gpus)+len(hostdevs) == 0:
			plan.PCIMMIO64GiB = types.Int64Null()
			return
		case state != nil && plan.GPUs.Equal(state.GPUs) && plan.Hostdevs.Equal(state.Hostdevs) && plan.Host.Equal(state.Host) &&
			(plan.PlacedGPUs.IsNull() && state.PlacedGPUs.IsNull() || plan.PlacedGPUs.Equal(state.PlacedGPUs)):
			plan.PCIMMIO64GiB = state.PCIMMIO64GiB
			return
		}
		plan.PCIMMIO64GiB = types.Int64Unknown()
	}
	if !known || config.PCIMMIO64GiB.IsUnknown() || plan.Host.IsUnknown() || len(gpus)+len(hostdevs) == 0 {
		return
	}
	if size == nil {
		if !explicit {
			plan.PCIMMIO64GiB = types.Int64Null() // tcp/tls: the window cannot be sized (see the description)
		}
		return
	}
	w, err := size(ctx, gpus, hostdevs)
	if err != nil {
		// Apply sizes it, or fails with the reason; the plan stays unknown.
		tflog.Warn(ctx, "sizing the 64-bit PCI window at plan time failed", map[string]any{"error": err.Error()})
		return
	}
	if explicit {
		if p := vmlife.MMIOTooSmall(int(config.PCIMMIO64GiB.ValueInt64()), w); p != "" {
			diags.AddAttributeError(path.Root("pci_mmio64_gib"), "pci_mmio64_gib is too small", p+".")
		}
		return
	}
	plan.PCIMMIO64GiB = mmioValue(w)
}

// hostForMMIO is the VM's connection when it can read the host's files;
// nil otherwise.
func (r *vmResource) hostForMMIO(m *vmModel) hosts.Host {
	if r.data == nil {
		return nil
	}
	c := r.data.client(m.Host.ValueString(), &diag.Diagnostics{})
	if c == nil || !c.ReadsHostFiles() {
		return nil
	}
	return c
}

// applyMMIO sizes a pci_mmio64_gib the plan left unknown, at apply: from
// the BARs where the host's files can be read, null (the firmware's
// default) with a warning where they cannot. A failed read fails the apply.
func (r *vmResource) applyMMIO(ctx context.Context, plan *vmModel, summary string, diags *diag.Diagnostics) {
	if !plan.PCIMMIO64GiB.IsUnknown() {
		return
	}
	gpus, hostdevs, _ := plan.passedThrough()
	c := r.hostForMMIO(plan)
	if c == nil {
		plan.PCIMMIO64GiB = types.Int64Null()
		diags.AddAttributeWarning(path.Root("pci_mmio64_gib"), summary+": 64-bit PCI window not sized",
			"Kohaku reads the BARs of the functions passed through from the host's sysfs, which it can do over "+
				"local and SSH connections only. The VM keeps the firmware's default 32 GiB window: set "+
				"pci_mmio64_gib if a BAR is larger (lspci -vv on the host shows each region's size).")
		return
	}
	w, err := vmlife.SizeMMIO(ctx, c, gpus, hostdevs)
	var absent *vmlife.AbsentFunctionError
	var entry *vmlife.GPUEntryError
	switch {
	case errors.As(err, &entry):
		// A gpus entry the host lacks: the GPU check that follows says so,
		// naming the binding to make.
		plan.PCIMMIO64GiB = types.Int64Null()
		return
	case errors.As(err, &absent):
		// A hostdev not on the host (yet): the domain is defined as before
		// and cannot start until it is there; nothing to size it from.
		plan.PCIMMIO64GiB = types.Int64Null()
		diags.AddAttributeWarning(path.Root("pci_mmio64_gib"), summary+": 64-bit PCI window not sized",
			fmt.Sprintf("%v. The VM keeps the firmware's default 32 GiB window: set pci_mmio64_gib if a BAR "+
				"of that function is larger.", err))
		return
	}
	if err != nil {
		diags.AddAttributeError(path.Root("pci_mmio64_gib"), summary+" failed: cannot size the 64-bit PCI window",
			fmt.Sprintf("%v. Nothing was changed. Set pci_mmio64_gib to size it by hand.", err))
		return
	}
	plan.PCIMMIO64GiB = mmioValue(w)
	tflog.Info(ctx, "sized the 64-bit PCI window from the BARs", map[string]any{"gib": w.GiB, "need": vfio.HumanBytes(w.NeedBytes), "functions": w.String()})
}
