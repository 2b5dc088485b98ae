package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// A seed problem deep in a nested attribute is placed by Terraform on the
// line of the resource's attribute that holds it (users = [...]), not on
// another attribute that shares the innermost name (the resource's own
// name), and the text names the whole path. The real CLI quotes the line.
func TestSeedDiagnosticOnTheAttributeLine(t *testing.T) {
	t.Parallel()
	cases := map[string]acctest.PlanError{
		"users[0].name": {
			Body: "user  = { name = \"kohaku\" }\n  users = [{ name = \"kohaku\" }]",
			Want: `(?s)in resource "kohaku_seed" "bad":\s+\d+:\s+users = \[\{ name = "kohaku" \}\]\s+users\[0\]\.name: "kohaku" is already declared`,
		},
		"user.name": {
			Body: "user = { name = \"Bob\" }",
			Want: `(?s)in resource "kohaku_seed" "bad":\s+\d+:\s+user = \{ name = "Bob" \}\s+user\.name: `,
		},
		"network[0].mac": {
			Body: "network = [{ mac = \"52:54:00:zz:00:01\", dhcp4 = true }]",
			Want: `(?s)in resource "kohaku_seed" "bad":\s+\d+:\s+network = \[\{ mac = .*network\[0\]\.mac: `,
		},
		"write_files[0].content_base64": {
			Body: "write_files = [{ path = \"/etc/x\", content_base64 = \"not base64!\" }]",
			Want: `(?s)in resource "kohaku_seed" "bad":\s+\d+:\s+write_files = \[.*write_files\[0\]\.content_base64 is not standard base64`,
		},
	}
	acctest.ExpectPlanErrors(t, protoV6Providers, badSeed, cases)
}

func TestConfigLine(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want path.Path }{
		{path.Root("users").AtListIndex(0).AtName("name"), path.Root("users").AtListIndex(0)},
		{path.Root("user").AtName("name"), path.Root("user")},
		{path.Root("meta_data").AtMapKey("k"), path.Root("meta_data").AtMapKey("k")},
		{path.Root("network").AtListIndex(1).AtName("addresses").AtListIndex(0), path.Root("network").AtListIndex(1)},
		{path.Root("timezone"), path.Root("timezone")},
	}
	for _, c := range cases {
		if got := configLine(c.in); !got.Equal(c.want) {
			t.Errorf("configLine(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}
