package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// vmReadRPCs is how many libvirt calls refreshing one stopped VM takes:
// the definition, the run state and the autostart flag, with no lookup. A
// running VM with the guest agent's channel takes one more, for its
// addresses.
const vmReadRPCs = 3

// Twenty VMs in one apply, ten at a time (Terraform's default parallelism)
// over the provider's single connection, then destroyed.
func TestAccVM_twenty(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "many")
	config := providerBlock(env.URI) + fmt.Sprintf(`
resource "kohaku_vm" "test" {
  count      = 20
  name       = "%s${count.index}"
  type       = "qemu"
  memory_mib = 128
  running    = false
  kernel     = %q
  initrd     = %q
  cmdline    = "root=/dev/vda rw console=ttyS0"
  disk = {
    base_pool   = %q
    base_volume = %q
    pool        = %q
  }
  network_interface = [{ type = "user" }]
}
`, prefix, env.Kernel, env.Initrd, env.ImagePool, env.Base, env.Pool)

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: config,
				Check: resource.ComposeAggregateTestCheckFunc(
					vmCheckCount(env, prefix, 20),
					vmCheckReadRPCs(t, env, 20),
				),
			},
			{Config: config, PlanOnly: true},
		},
	})
}

// vmCheckCount checks with virsh that n domains, all shut off, and n overlay
// volumes exist under prefix.
func vmCheckCount(env acctest.VMEnv, prefix string, n int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		out, err := acctest.Virsh(env.URI, "list", "--all")
		if err != nil {
			return err
		}
		doms := 0
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[1], prefix) {
				doms++
				if state := strings.Join(f[2:], " "); state != "shut off" {
					return fmt.Errorf("%s is %q, want shut off (running = false)", f[1], state)
				}
			}
		}
		left, err := acctest.Leftovers(env.URI, prefix, env.Pool)
		if err != nil {
			return err
		}
		if doms != n || len(left) != 2*n {
			return fmt.Errorf("want %d domains and %d overlays, found %d domains among: %s", n, n, doms, strings.Join(left, ", "))
		}
		return nil
	}
}

// vmCheckReadRPCs refreshes each VM the way Read does, over a connection of
// its own, and checks that each takes the same small number of libvirt calls.
func vmCheckReadRPCs(t *testing.T, env acctest.VMEnv, n int) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		ctx := context.Background()
		c := vmClient(t, env.URI)
		if _, err := c.ListDomains(ctx); err != nil { // dial and handshake first
			return err
		}
		for i := range n {
			rs := s.RootModule().Resources[fmt.Sprintf("kohaku_vm.test.%d", i)]
			if rs == nil {
				return fmt.Errorf("kohaku_vm.test.%d is not in state", i)
			}
			a := rs.Primary.Attributes
			prior := &vmModel{Name: types.StringValue(a["name"]), OverlayVolume: types.StringValue(a["overlay_volume"])}
			before := c.RPCs()
			view, err := vmlife.Read(ctx, c, virt.DomainRef{UUID: a["uuid"], Name: a["name"]}, volumeRef(prior.OverlayVolume), false)
			if err != nil {
				return err
			}
			if _, asked := vmlife.GuestAddresses(ctx, c, view); asked {
				return fmt.Errorf("%s: a stopped VM's guest agent answered", a["name"])
			}
			if got := c.RPCs() - before; got != vmReadRPCs {
				return fmt.Errorf("refreshing %s took %d libvirt calls, want %d", a["name"], got, vmReadRPCs)
			}
			if view.Status.Active || view.Overlay == nil {
				return fmt.Errorf("%s: active=%t overlay=%v", a["name"], view.Status.Active, view.Overlay)
			}
		}
		t.Logf("refresh: %d libvirt calls per VM for each of %d VMs", vmReadRPCs, n)
		return nil
	}
}
