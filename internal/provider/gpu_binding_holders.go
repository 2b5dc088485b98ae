package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// warnNoFLR warns at plan time when a display-class function of the plan
// cannot be reset on its own (no function-level reset in its reset_method),
// where the host's files can be read.
func warnNoFLR(ctx context.Context, c hosts.Host, bind []vfio.Binding, diags *diag.Diagnostics) {
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
