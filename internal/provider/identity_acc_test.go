package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// Each resource's identity follows its state (host null for the default
// host), and an import block that gives only the identity imports the VM
// with a plan that changes nothing, and the seed with an update in place. Resource identity came
// with Terraform 1.12; make testacc-tf114 runs this under a newer one.
func TestAccIdentity_importByIdentity(t *testing.T) {
	acctest.NeedTerraformAtLeast(t, 1, 12, "Import by resource identity")
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "ident")
	config := vmSeedConfig(env, prefix, true)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity("kohaku_vm.test", map[string]knownvalue.Check{
						"host": knownvalue.Null(),
						"uuid": knownvalue.NotNull(),
					}),
					statecheck.ExpectIdentityValueMatchesState("kohaku_vm.test", tfjsonpath.New("uuid")),
					statecheck.ExpectIdentity("kohaku_seed.test", map[string]knownvalue.Check{
						"host": knownvalue.Null(),
						"pool": knownvalue.StringExact(env.Pool),
						"name": knownvalue.StringExact(prefix + "seed.iso"),
					}),
				},
			},
			{
				Config:          config,
				ResourceName:    "kohaku_vm.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
			},
			{
				// A seed's inputs cannot be read back from its ISO, so the
				// import plans an update in place of them, as an import by
				// ID does; never a replacement.
				Config:             config,
				ResourceName:       "kohaku_seed.test",
				ImportState:        true,
				ImportStateKind:    resource.ImportBlockWithResourceIdentity,
				ExpectNonEmptyPlan: true,
				ImportPlanChecks: resource.ImportPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_seed.test", plancheck.ResourceActionUpdate),
				}},
			},
		},
	})
}
