package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/acctest/nestedhost"
)

// drainFleet is the local test host and l1, with the named host drained
// ("" the default host, "l1", or "none").
func drainFleet(h *nestedhost.Host, drained string) string {
	top, l1 := "", ""
	switch drained {
	case "":
		top = "\n  drain = true"
	case "l1":
		l1 = ", drain = true"
	}
	return faultCLIHead + fmt.Sprintf("provider \"kohaku\" {\n  uri   = %q%s\n  hosts = { l1 = { uri = %q%s } }\n}\n", accURI(), top, h.URI, l1)
}

// Draining a host for maintenance, between the local test host and l1,
// through the terraform CLI (no guest boots: the VMs are stopped and have
// no disk):
//   - a CPU-only VM asks the fleet and lands on one host;
//   - that host is drained: the plan moves the VM to the other (an
//     update, not a replacement: the same UUID) and says why; after the
//     apply the domain is there and gone from the drained host, and the
//     next plan is empty;
//   - a new VM asking the fleet avoids the drained host, and
//     kohaku_capacity says it is drained;
//   - a VM whose placement allows only the drained host stays there,
//     with a warning and no change.
func TestAccVM_drainMovesPlacedVMs(t *testing.T) {
	h := nestedhost.Require(t)
	names := []string{"kohaku-acc-drain-a", "kohaku-acc-drain-b", "kohaku-acc-drain-c"}
	local := vmClient(t, accURI())
	for _, n := range names {
		removeNestedDomainAfter(t, h, n)
		t.Cleanup(func() {
			if ref, err := local.LookupDomain(context.Background(), n); err == nil {
				_, _ = local.StopDomain(context.Background(), ref, 0)
				_ = local.UndefineDomain(context.Background(), ref)
			}
		})
	}
	onHost := func(host, name string) bool {
		if host == "l1" {
			_, err := nestedhost.VirshErr(h, "domstate", name)
			return err == nil
		}
		_, err := local.LookupDomain(context.Background(), name)
		return err == nil
	}
	attrs := func(w *acctest.Workspace, addr string) map[string]any {
		for _, r := range w.State() {
			if r.Address == addr {
				return r.Values
			}
		}
		t.Fatalf("%s is not in state", addr)
		return nil
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }

	a := placedVMConfig("a", names[0], 0, "")
	w := acctest.NewWorkspace(t, drainFleet(h, "none")+a)
	w.Must("apply", "-auto-approve", "-input=false")
	from := fmt.Sprint(attrs(w, "kohaku_vm.a")["host"])
	uuid := fmt.Sprint(attrs(w, "kohaku_vm.a")["uuid"])
	to := "l1"
	if from == "l1" {
		to = ""
	}
	if !onHost(from, names[0]) {
		t.Fatalf("%s is not on %q, where its state says", names[0], from)
	}

	t.Logf("%s landed on %q; draining it", names[0], from)
	// drain it: the plan moves the VM, in place, and says why
	w.Write(drainFleet(h, from) + a)
	out := w.Must("plan", "-input=false")
	for _, want := range []string{"kohaku_vm.a will be updated in-place", "moves off drained", "Plan: 0 to add, 1 to change, 0 to destroy"} {
		if !strings.Contains(flat(out), want) {
			t.Errorf("the drain's plan lacks %q:\n%s", want, out)
		}
	}
	w.Must("apply", "-auto-approve", "-input=false")
	v := attrs(w, "kohaku_vm.a")
	if fmt.Sprint(v["host"]) != to || fmt.Sprint(v["uuid"]) != uuid {
		t.Errorf("after the drain: host %q uuid %v, want %q and the same UUID %s", v["host"], v["uuid"], to, uuid)
	}
	if !onHost(to, names[0]) || onHost(from, names[0]) {
		t.Errorf("after the drain %s is on %q: %t, still on the drained %q: %t", names[0], to, onHost(to, names[0]), from, onHost(from, names[0]))
	}
	if out, err := w.Run("plan", "-input=false", "-detailed-exitcode"); err != nil {
		t.Errorf("the plan after the move is not empty (%v):\n%s", err, out)
	}

	// a new VM avoids the drained host; capacity says it is drained
	reads := fmt.Sprintf(`
data "kohaku_capacity" "all" {}

output "drained" {
  value = data.kohaku_capacity.all.capacity[%q].drained
}
`, from)
	only := fmt.Sprintf("[%q]", from)
	w.Write(drainFleet(h, from) + a + placedVMConfig("b", names[1], 0, "") + reads)
	w.Must("apply", "-auto-approve", "-input=false")
	if got := fmt.Sprint(attrs(w, "kohaku_vm.b")["host"]); got != to {
		t.Errorf("a new VM went to %q, want %q (the other host is drained)", got, to)
	}
	if d := strings.TrimSpace(w.Must("output", "-json", "drained")); d != "true" {
		t.Errorf("kohaku_capacity says drained = %s for %q", d, from)
	}

	// a VM that may go only to the drained host: placed there before the
	// drain, it stays, with a warning and no change
	w.Write(drainFleet(h, "none") + a + placedVMConfig("b", names[1], 0, "") + placedVMConfig("c", names[2], 0, only))
	w.Must("apply", "-auto-approve", "-input=false")
	w.Write(drainFleet(h, from) + a + placedVMConfig("b", names[1], 0, "") + placedVMConfig("c", names[2], 0, only))
	out, err := w.Run("plan", "-input=false", "-detailed-exitcode")
	if err != nil && !strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	if !strings.Contains(flat(out), "VM "+names[2]+" stays on drained") || !strings.Contains(flat(out), "Every host its placement allows is drained") ||
		strings.Contains(out, "kohaku_vm.c will be") {
		t.Errorf("the VM bound to the drained host is not kept with a warning:\n%s", out)
	}
	w.Must("destroy", "-auto-approve", "-input=false")
	for _, n := range names {
		if onHost("", n) || onHost("l1", n) {
			t.Errorf("%s is left after destroy", n)
		}
	}
}
