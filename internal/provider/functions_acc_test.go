package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// A running tiny guest's NIC takes the MAC provider::kohaku::seed_mac gives
// for its seed, and the domain libvirt runs has that MAC: the value the
// seed's own derivation computes for that name and index.
func TestAccFunctions_seedMAC(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "fnmac")
	seedName := prefix + "seed.iso"
	want := seed.DefaultMAC(seedName, 1)
	resource.Test(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_8_0)},
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{{
			Config: functionsConfig + providerBlock(env.URI) + tinyGuest(t, env.Pool, "tiny", "test", seedName, prefix+"vm", "tiny",
				"  network_interface = [{ type = \"user\", mac = provider::kohaku::seed_mac(kohaku_seed.tiny.name, 1) }]\n"),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("kohaku_vm.test", tfjsonpath.New("network_interface").AtSliceIndex(0).AtMapKey("mac"), knownvalue.StringExact(want)),
				statecheck.ExpectKnownValue("kohaku_vm.test", tfjsonpath.New("guest").AtMapKey("ready_via"), knownvalue.StringExact("channel")),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				acctest.CheckDomState(env, prefix+"vm", "running"),
				acctest.CheckXML(env, prefix+"vm", "<mac address='"+want+"'/>"),
			),
		}},
	})
}
