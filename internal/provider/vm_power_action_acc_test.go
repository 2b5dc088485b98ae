package provider

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
)

// powerActionConfig is a tiny guest and one kohaku_vm_power action per
// operation the test invokes.
func powerActionConfig(t *testing.T, env acctest.VMEnv, prefix string) string {
	t.Helper()
	actions := ""
	for _, a := range []struct{ name, body string }{
		{"shutdown_deaf", `operation = "shutdown"` + "\n    timeout   = \"15s\""},
		{"off", `operation = "shutdown"` + "\n    force     = true\n    timeout   = \"25s\""},
		{"on", `operation       = "start"` + "\n    wait_for_report = true\n    timeout         = \"3m\""},
		{"reset", `operation       = "reset"` + "\n    wait_for_report = true\n    timeout         = \"3m\""},
		{"reboot", `operation = "reboot"`},
	} {
		actions += fmt.Sprintf("\naction \"kohaku_vm_power\" %q {\n  config {\n    vm        = kohaku_vm.test.id\n    %s\n  }\n}\n", a.name, a.body)
	}
	return "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" +
		providerBlock(env.URI) + tinyGuest(t, env.Pool, "tiny", "test", prefix+"seed.iso", prefix+"vm", "tiny", "") + actions
}

// boots counts the tiny guest's boots in its serial console log (a line
// per boot once it found its seed).
func boots(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(domain.DefaultSerialLogPath(name))
	if err != nil {
		t.Fatalf("reading the serial console log: %v", err)
	}
	return strings.Count(string(b), "kohaku-tiny: seed on")
}

// kohaku_vm_power under Terraform 1.14, invoked with terraform apply
// -invoke on a tiny guest: a shutdown the guest ignores (it has nothing that
// handles ACPI) fails at its timeout and leaves it running; with force it is
// forced off; start waits for the guest's report; reset restarts it (a new
// boot in its console log) and waits for the report; reboot is asked for
// through ACPI (the guest agent is absent). The VM's state is unaffected:
// the plan afterwards is empty.
func TestAccVMPowerAction(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_vm_power action")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "power")
	vm := prefix + "vm"
	w := acctest.NewWorkspace(t, powerActionConfig(t, env, prefix))
	w.Must("apply", "-auto-approve", "-input=false")
	state := func(want string) {
		t.Helper()
		if got, err := acctest.Virsh(env.URI, "domstate", vm); err != nil || got != want {
			t.Fatalf("virsh domstate %s = %q (%v), want %q", vm, got, err, want)
		}
	}
	invoke := func(action string) (string, error) {
		return w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_power."+action)
	}
	state("running")
	first := boots(t, vm)
	if first != 1 {
		t.Fatalf("the console log shows %d boots after create, want 1", first)
	}

	out, err := invoke("shutdown_deaf")
	if err == nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "Set force = true") {
		t.Fatalf("a shutdown the guest ignores did not fail naming force (err %v):\n%s", err, out)
	}
	if !strings.Contains(out, "through the ACPI") {
		t.Errorf("the output does not say the guest was asked through ACPI:\n%s", out)
	}
	state("running")

	out, err = invoke("off")
	if err != nil {
		t.Fatalf("forced shutdown: %v\n%s", err, out)
	}
	for _, want := range []string{"asked " + vm + " to shut down through the ACPI", "forcing " + vm + " off", "was forced off"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	state("shut off")

	out, err = invoke("on")
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	if !strings.Contains(out, vm+" reported after") {
		t.Errorf("start returned without saying the guest reported:\n%s", out)
	}
	state("running")
	if n := boots(t, vm); n != first+1 {
		t.Errorf("the console log shows %d boots after start, want %d", n, first+1)
	}

	out, err = invoke("reset")
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	state("running")
	if !acctest.Poll(60e9, func() bool { return boots(t, vm) == first+2 }) {
		t.Errorf("the console log shows %d boots after reset, want %d", boots(t, vm), first+2)
	}

	out, err = invoke("reboot")
	if err != nil {
		t.Fatalf("reboot: %v\n%s", err, out)
	}
	if !strings.Contains(out, "asked "+vm+" to reboot through the ACPI") {
		t.Errorf("the output does not say the guest was asked to reboot through ACPI:\n%s", out)
	}
	state("running")

	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Fatalf("the plan after the power actions is not empty (%v):\n%s", err, out)
	}
	w.Must("destroy", "-auto-approve", "-input=false")
	if err := acctest.CheckExact(env, prefix, nil); err != nil {
		t.Fatal(err)
	}
}

// seedIIDs lists the instance ids the tiny guest found on its seed, boot
// by boot, from its serial console log.
func seedIIDs(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(domain.DefaultSerialLogPath(name))
	if err != nil {
		t.Fatalf("reading the serial console log: %v", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if _, rest, ok := strings.Cut(line, "kohaku-tiny: seed on "); ok {
			if _, iid, ok := strings.Cut(rest, "instance-id "); ok {
				iid, _, _ = strings.Cut(iid, ",")
				out = append(out, strings.TrimSpace(iid))
			}
		}
	}
	return out
}

// The guide's recipe for a seed change on a VM that keeps its disk, under
// Terraform 1.14: a reset (like any reboot) keeps the QEMU process, which
// keeps the seed file it opened, so the guest boots on the old seed; the
// recipe's power cycle (shutdown, then start with wait_for_report, from an
// action_trigger on a terraform_data that follows the seed's instance id)
// boots it on the new one. The tiny guest prints the instance id it finds
// on each boot; it ignores ACPI, so the shutdown here is forced.
func TestAccVMPowerAction_seedChangePowerCycle(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 14, "The kohaku_vm_power action")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "cycle")
	vm := prefix + "vm"
	// follow: the terraform_data follows the seed's instance id as the
	// recipe has it; until then it holds a constant, so that the trigger
	// first fires on the recipe's step (an after_update trigger does not
	// fire when its resource is created).
	config := func(hostname string, follow bool) string {
		input := `"held"`
		if follow {
			input = "kohaku_seed.tiny.instance_id"
		}
		c := "terraform {\n  required_providers {\n    kohaku = { source = \"kohaku/kohaku\" }\n  }\n}\n" +
			providerBlock(env.URI) + tinyGuest(t, env.Pool, "tiny", "test", prefix+"seed.iso", vm, hostname, "") + `
output "iid" {
  value = kohaku_seed.tiny.instance_id
}

action "kohaku_vm_power" "reset" {
  config {
    vm        = kohaku_vm.test.id
    operation = "reset"
  }
}

action "kohaku_vm_power" "stop" {
  config {
    vm        = kohaku_vm.test.id
    operation = "shutdown"
    force     = true
    timeout   = "25s"
  }
}

action "kohaku_vm_power" "start" {
  config {
    vm              = kohaku_vm.test.id
    operation       = "start"
    wait_for_report = true
    timeout         = "3m"
  }
}
`
		c += `
resource "terraform_data" "seed" {
  input = ` + input + `

  lifecycle {
    action_trigger {
      events  = [after_update]
      actions = [action.kohaku_vm_power.stop, action.kohaku_vm_power.start]
    }
  }

  depends_on = [kohaku_vm.test]
}
`
		return c
	}
	w := acctest.NewWorkspace(t, config("tiny", false))
	w.Must("apply", "-auto-approve", "-input=false")
	iid := func() string { t.Helper(); return strings.TrimSpace(w.Must("output", "-raw", "iid")) }
	first := iid()
	if got := seedIIDs(t, vm); len(got) != 1 || got[0] != first {
		t.Fatalf("after create the guest found instance ids %q, want [%s]", got, first)
	}

	// The seed changes (a new instance id) with no trigger; a reset boots
	// the guest again, on the seed its QEMU opened at start.
	w.Write(config("tiny-two", false))
	w.Must("apply", "-auto-approve", "-input=false")
	second := iid()
	if second == first {
		t.Fatalf("a hostname change kept the instance id %s", first)
	}
	if out, err := w.Run("apply", "-auto-approve", "-input=false", "-invoke=action.kohaku_vm_power.reset"); err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if !acctest.Poll(60e9, func() bool { return len(seedIIDs(t, vm)) == 2 }) {
		t.Fatalf("no second boot in the console log after the reset: %q", seedIIDs(t, vm))
	}
	if got := seedIIDs(t, vm)[1]; got != first {
		t.Errorf("after a reset the guest found instance id %s, want the old seed's %s (the new one is %s)", got, first, second)
	}

	// The recipe: the next seed change triggers the power cycle, and the
	// guest boots on the new seed before the apply returns.
	w.Write(config("tiny-three", true))
	out := w.Must("apply", "-auto-approve", "-input=false")
	third := iid()
	got := seedIIDs(t, vm)
	if len(got) != 3 || got[2] != third {
		t.Errorf("after the triggered power cycle the guest found instance ids %q, want a third boot on %s\n%s", got, third, out)
	}
	if !strings.Contains(out, vm+" reported after") {
		t.Errorf("the apply did not wait for the guest's report:\n%s", out)
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Fatalf("the plan after the power cycle is not empty (%v):\n%s", err, out)
	}
	w.Must("destroy", "-auto-approve", "-input=false")
	if err := acctest.CheckExact(env, prefix, nil); err != nil {
		t.Fatal(err)
	}
}
