package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// checkHolders refuses, before anything is unbound, when processes on the
// host hold functions of the plan, naming them. Where the host cannot be
// read (tcp, tls) or the look fails, the bind goes ahead (with a warning
// for a failed look): call_timeout and the timeouts block still bound a
// hang.
func checkHolders(ctx context.Context, c *hosts.Host, bind []vfio.Binding, target vfio.Address, diags *diag.Diagnostics) bool {
	src := gpubind.HostHolders(c)
	if src == nil {
		tflog.Debug(ctx, "the host's processes cannot be read over this connection; not looking for holders")
		return true
	}
	err := gpubind.CheckHolders(ctx, src, bind)
	var held *gpubind.HoldersError
	switch {
	case errors.As(err, &held):
		diags.AddError("Binding "+target.String()+" to vfio-pci refused: the device is in use on the host",
			err.Error()+"\n\nNothing was changed.")
		return false
	case err != nil:
		diags.AddWarning("Could not look for processes holding "+target.String(),
			fmt.Sprintf("%v. The bind goes ahead; should a process hold the device, the unbind can hang until call_timeout or the binding's timeout.", err))
	}
	return true
}

// warnNoFLR warns at plan time when a display-class function of the plan
// cannot be reset on its own (no function-level reset in its reset_method),
// where the host's files can be read.
func warnNoFLR(ctx context.Context, c *hosts.Host, bind []vfio.Binding, diags *diag.Diagnostics) {
	if !c.ReadsHostFiles() {
		return
	}
	var gpus []vfio.Address
	for _, b := range bind {
		if b.Class>>16 == 0x03 {
			gpus = append(gpus, b.Address)
		}
	}
	if len(gpus) == 0 {
		return
	}
	fns, err := vfio.ReadFunctions(ctx, c, gpus)
	if err != nil {
		tflog.Warn(ctx, "reading the GPU's reset methods failed", map[string]any{"error": err.Error()})
		return
	}
	for _, a := range gpus {
		fn, ok := fns[a]
		if !ok || fn.HasFLR() {
			continue
		}
		methods := "none"
		if len(fn.ResetMethods) > 0 {
			methods = strings.Join(fn.ResetMethods, ", ")
		}
		diags.AddAttributeWarning(path.Root("address"), "GPU "+a.String()+" has no function-level reset",
			fmt.Sprintf("The host's kernel can reset it only by: %s (%s). Between VMs such a GPU may not be reset "+
				"cleanly and can come back in a state its driver, in the next guest or on the host, cannot use "+
				"(the \"reset bug\"); a host reboot recovers it. Prefer cards that list flr, and stop a VM before "+
				"giving its GPU to another.", methods, vfio.ResetMethodPath(a)))
	}
}
