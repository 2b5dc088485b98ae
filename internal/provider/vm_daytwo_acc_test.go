package provider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	tfacctest "github.com/hashicorp/terraform-plugin-testing/helper/acctest"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// dayTwoConfig is the real cloud-init guest r (readyResources, its boot disk
// sizeGiB) with the data disks disksR, and the tiny guest b with disksB.
func dayTwoConfig(t *testing.T, env acctest.VMEnv, prefix, share string, sizeGiB int, disksR, disksB string) string {
	t.Helper()
	guest := readyResources(env, prefix+"r-", share, "r", "", "",
		"  data_disks = ["+disksR+"]\n  timeouts {\n    create = \"15m\"\n  }")
	guest = strings.Replace(guest, "  disk = {\n", fmt.Sprintf("  disk = {\n    size_gib    = %d\n", sizeGiB), 1)
	return providerBlock(env.URI) + guest +
		tinyGuest(t, env.Pool, "b", "b", prefix+"b-seed.iso", prefix+"b", "tinyb", "  data_disks = ["+disksB+"]\n")
}

// guestRun runs a shell command in the guest through its agent, failing the
// step when it fails.
func guestRun(env acctest.VMEnv, dom, script string, got *string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.GuestExec(env.URI, dom, "/bin/sh", "-c", script)
		if got != nil {
			*got = out
		}
		return err
	}
}

// checkGuestSees compares what a command prints in the guest with want.
func checkGuestSees(env acctest.VMEnv, dom, script, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.GuestExec(env.URI, dom, "/bin/sh", "-c", script)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != want {
			return fmt.Errorf("in %s, %q printed %q, want %q", dom, script, out, want)
		}
		return nil
	}
}

// logAgentCost times the call a refresh adds per running VM, libvirt's
// interface addresses through the guest agent, on a guest whose agent
// answers and on one whose agent channel nobody serves (median of 20).
func logAgentCost(t *testing.T, env acctest.VMEnv, names ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		c := vmClient(t, env.URI)
		for _, n := range names {
			ref, err := c.LookupDomain(context.Background(), n)
			if err != nil {
				return err
			}
			var took []time.Duration
			var last error
			for range 20 {
				start := time.Now()
				_, last = c.GuestInterfaces(context.Background(), ref)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			t.Logf("guest addresses of %s through the agent: median %s, max %s (last error: %v)", n, took[10], took[19], last)
		}
		return nil
	}
}

// checkConsoleSays waits up to a minute for the domain's console log to
// match re.
func checkConsoleSays(name string, re *regexp.Regexp) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			log := readConsole(name)
			if re.MatchString(log) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the console of %s never said %s:\n%s", name, re, log)
			}
		}
	}
}

// Day two on a real cloud-init guest, in one boot: its boot disk grows in
// place while it runs, and what it wrote before is still there; it sees the
// new size at once; the domain and its overlay are the same ones; a
// smaller size is refused at plan. An address it gains later is read fresh
// by the next refresh through its guest agent. A data
// disk hot-plugged into it is written by the guest, unplugged (kept), then
// plugged into a second VM, the tiny guest, which reads back what the first
// wrote. Destroy keeps the kept volume and deletes the one Kohaku made.
func TestAccVM_dayTwoRealGuest(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "day2")
	share := t.TempDir()
	r, b := prefix+"r-vm", prefix+"b"
	data, scratch := r+"-data.qcow2", r+"-scratch.qcow2"
	nonce := tfacctest.RandString(16)
	disks := fmt.Sprintf(`
    { name = "data", size_gib = 1, pool = %[1]q, keep = true },
    { name = "scratch", size_gib = 1, pool = %[1]q },
  `, env.Pool)
	scratchOnly := fmt.Sprintf(`{ name = "scratch", size_gib = 1, pool = %q }`, env.Pool)
	moved := fmt.Sprintf(`{ name = "moved", pool = %q, volume = %q }`, env.Pool, data)
	sameUUID := statecheck.CompareValue(compare.ValuesSame())
	sameOverlay := statecheck.CompareValue(compare.ValuesSame())
	same := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameUUID.AddStateValue("kohaku_vm.r", tfjsonpath.New("uuid")),
			sameOverlay.AddStateValue("kohaku_vm.r", tfjsonpath.New("overlay_volume")),
		}
	}
	var domID string
	sectors := func(gib int) string { return strconv.Itoa(gib << 30 / 512) }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy: resource.ComposeTestCheckFunc(
			checkVolumes(env, []string{data}, []string{scratch, r + "-root", b + "-root"}),
			func(*terraform.State) error {
				for _, n := range []string{r, b} {
					if _, err := acctest.Virsh(env.URI, "domstate", n); err == nil {
						return fmt.Errorf("domain %s is still defined", n)
					}
				}
				return nil
			},
		),
		Steps: []resource.TestStep{
			{
				Config:            dayTwoConfig(t, env, prefix, share, 4, "", ""),
				ConfigStateChecks: same(),
				Check: resource.ComposeTestCheckFunc(
					checkDomID(env, r, &domID),
					checkGuestSees(env, r, "cat /sys/block/vda/size", sectors(4)),
					guestRun(env, r, "echo "+nonce+" > /root/before-grow && sync", nil),
				),
			},
			{
				// Grown while it runs: no restart, and the guest's kernel
				// has the new size of vda at once.
				Config: dayTwoConfig(t, env, prefix, share, 5, "", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.r", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: same(),
				Check: resource.ComposeTestCheckFunc(
					checkDomID(env, r, &domID),
					checkBlockCapacity(env, r, "vda", 5<<30),
					checkGuestSees(env, r, "cat /sys/block/vda/size", sectors(5)),
					checkGuestSees(env, r, "cat /root/before-grow", nonce),
				),
			},
			{
				Config:      dayTwoConfig(t, env, prefix, share, 4, "", ""),
				ExpectError: regexp.MustCompile(`(?s)Disk cannot shrink.*would be lost`),
			},
			{
				// An address the guest gained after create: the refresh
				// reads it through the agent into guest.addresses, and
				// kohaku_vm_health reports it too; the tiny guest, whose
				// agent channel nobody serves, reads as null at once.
				PreConfig: func() {
					if _, err := acctest.GuestExec(env.URI, r, "/bin/sh", "-c",
						"ip addr add 10.0.2.99/24 dev $(ip -o -4 addr show | awk '/10.0.2.15/ {print $2}')"); err != nil {
						t.Fatal(err)
					}
				},
				Config: dayTwoConfig(t, env, prefix, share, 5, "", "") + `
data "kohaku_vm_health" "r" {
  name = kohaku_vm.r.name
}

data "kohaku_vm_health" "b" {
  name         = kohaku_vm.b.name
  timeout      = "2s"
  allow_silent = true
}
`,
				ConfigStateChecks: append(same(),
					statecheck.ExpectKnownValue("data.kohaku_vm_health.b", tfjsonpath.New("addresses"), knownvalue.Null())),
				Check: resource.ComposeTestCheckFunc(
					resource.TestCheckTypeSetElemNestedAttrs("kohaku_vm.r", "guest.addresses.*", map[string]string{"address": "10.0.2.99/24"}),
					resource.TestCheckTypeSetElemNestedAttrs("kohaku_vm.r", "guest.addresses.*", map[string]string{"address": "10.0.2.15/24"}),
					resource.TestCheckTypeSetElemNestedAttrs("data.kohaku_vm_health.r", "addresses.*", map[string]string{"address": "10.0.2.99/24"}),
					logAgentCost(t, env, r, b),
				),
			},
			{
				// Two data disks plugged in while it runs; the guest writes
				// to the one to keep, found by its serial.
				Config:            dayTwoConfig(t, env, prefix, share, 5, disks, ""),
				ConfigStateChecks: same(),
				Check: resource.ComposeTestCheckFunc(
					checkDomID(env, r, &domID),
					checkBlockList(env, r, []string{data, scratch}, nil),
					guestRun(env, r, `d=/dev/disk/by-id/virtio-data
for i in $(seq 60); do [ -b $d ] && break; sleep 1; done
echo `+nonce+` | dd of=$d oflag=direct conv=fsync,sync bs=512 count=1 2>/dev/null
head -n1 $d`, nil),
				),
			},
			{
				// Unplugged from r and kept; r is still running.
				Config:            dayTwoConfig(t, env, prefix, share, 5, scratchOnly, ""),
				ConfigStateChecks: same(),
				Check: resource.ComposeTestCheckFunc(
					checkDomID(env, r, &domID),
					checkBlockList(env, r, []string{scratch}, []string{data}),
					checkVolumes(env, []string{data, scratch}, nil),
					checkGuestSees(env, r, "ls /dev/disk/by-id/ | grep -c virtio-data || true", "0"),
				),
			},
			{
				// Plugged into b, whose guest names it on its console with
				// the line r wrote.
				Config: dayTwoConfig(t, env, prefix, share, 5, scratchOnly, moved),
				Check: resource.ComposeTestCheckFunc(
					checkBlockList(env, b, []string{data}, nil),
					checkConsoleSays(b, regexp.MustCompile(`kohaku-tiny: disk moved on vd[a-z]+: `+nonce)),
				),
			},
		},
	})
}
