package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// An image to be created needs its source; the plan says so on source's
// line before any host is asked. (An imported image may leave source out:
// the image adoption acceptance test plans one.)
func TestImage_sourceNeededToCreate(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      providerBlock("test:///default") + "resource \"kohaku_image\" \"x\" {\n  pool = \"default\"\n  name = \"base.qcow2\"\n}\n",
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)Missing source.*with kohaku_image.x.*source.*Creating an image needs its source`),
		}},
	})
}
