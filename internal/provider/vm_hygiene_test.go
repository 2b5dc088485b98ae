package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// A destroy's warnings name each quarantined GPU with why and how to
// return it, and each GPU the connection could not reset.
func TestWarnHygiene(t *testing.T) {
	t.Parallel()
	g1, g2 := vfio.Address{Bus: 0x18}, vfio.Address{Bus: 0x2a}
	var diags diag.Diagnostics
	warnHygiene("train", nil, &diags)
	warnHygiene("train", &vmlife.Hygiene{Reset: []vfio.Address{g1}}, &diags)
	if len(diags) != 0 {
		t.Fatalf("warnings for GPUs reset: %v", diags)
	}
	warnHygiene("train", &vmlife.Hygiene{
		Quarantined: []vmlife.GPUNote{{GPU: g1, Why: "not reset after VM train: no reset method"}},
		Unreset:     []vmlife.GPUNote{{GPU: g2, Why: "needs a qemu+ssh:// connection"}},
	}, &diags)
	if len(diags) != 2 || diags.HasError() {
		t.Fatalf("diagnostics %v", diags)
	}
	q, u := diags[0], diags[1]
	if q.Summary() != "Destroying VM train: GPU 0000:18:00.0 quarantined" ||
		!strings.Contains(q.Detail(), "no reset method") || !strings.Contains(q.Detail(), "kohaku_gpu_reset action") ||
		!strings.Contains(q.Detail(), "virsh vol-delete --pool kohaku-claims kohaku-claim-0000_18_00_0.quarantine") {
		t.Errorf("quarantine warning %q: %q", q.Summary(), q.Detail())
	}
	if u.Summary() != "Destroying VM train: GPU 0000:2a:00.0 given back without a reset" || !strings.Contains(u.Detail(), "qemu+ssh://") {
		t.Errorf("unreset warning %q: %q", u.Summary(), u.Detail())
	}
}
