package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// kohaku_mdev's own checks run at plan time, before any host is asked.
func TestMdevRejectsBadInputAtPlan(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body string
		want []string
	}{
		"upper-case uuid": {
			body: `parent = "mtty_mtty"
  type   = "mtty-2"
  uuid   = "6B6F6861-6B75-4D64-8000-000000000001"`,
			want: []string{`Invalid Attribute Value Match`, `uuid`, `must be a UUID in lower case`},
		},
		"empty type": {
			body: `parent = "0000:41:00.0"
  type   = ""`,
			want: []string{`Invalid Attribute Value Length`, `type`, `at least 1`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config:      vmPlanProvider + "resource \"kohaku_mdev\" \"m\" {\n  " + tc.body + "\n}\n",
					PlanOnly:    true,
					ExpectError: vmErrRE(tc.want...),
				}},
			})
		})
	}
}

func TestMdevImportIDs(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"6b6f6861-6b75-4d64-8000-000000000001":      "6b6f6861-6b75-4d64-8000-000000000001",
		"gpu2/6B6F6861-6B75-4D64-8000-000000000001": "gpu2/6b6f6861-6b75-4d64-8000-000000000001",
		"/6b6f6861-6b75-4d64-8000-000000000001":     "",
		"gpu2/mtty-2":                               "",
		"6b6f6861":                                  "",
	} {
		host, id, ok := parseMdevImportID(raw)
		got := ""
		if ok {
			got = hostScopedID(host, id)
		}
		if got != want {
			t.Errorf("import %q: id %q (ok %v), want %q", raw, got, ok, want)
		}
	}
}
