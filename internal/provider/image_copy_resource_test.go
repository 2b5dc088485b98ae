package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// A copy's source must be an image id, and not the copy itself; both are
// refused before any host is asked.
func TestImageCopy_validation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ attrs, want string }{
		{`source = "golden.qcow2"` + "\n  pool = \"default\"\n  name = \"g.qcow2\"", `(?s)Invalid image id.*not\s+an\s+image\s+id`},
		{`source = "a/b/c/d"` + "\n  pool = \"default\"\n  name = \"g.qcow2\"", `(?s)Invalid image id`},
		{`source = "default/g.qcow2"` + "\n  pool = \"default\"\n  name = \"g.qcow2\"", `(?s)Copy onto its source.*default/g.qcow2`},
		{`source = "gpu2/default/g.qcow2"` + "\n  host = \"gpu2\"\n  pool = \"default\"\n  name = \"g.qcow2\"", `(?s)Copy onto its source`},
		{`source = "default/g.qcow2"` + "\n  pool = \"default\"\n  name = \"g.qcow2\"\n  source_digest = \"sha256:ABC\"", `(?s)source_digest.*64\s+lower-case\s+hex`},
	} {
		resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: protoV6Providers, Steps: []resource.TestStep{{
			Config:      providerBlock("test:///default") + "resource \"kohaku_image_copy\" \"x\" {\n  " + c.attrs + "\n}\n",
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(c.want),
		}}})
	}
}
