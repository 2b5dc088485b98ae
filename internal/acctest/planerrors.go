package acctest

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// PlanError is a configuration body that plan must refuse, and a regular
// expression its error matches.
type PlanError struct {
	Body, Want string
}

// ExpectPlanErrors runs each case as a parallel, plan-only unit test of
// config(case.Body) against the provider the factories serve: the plan must
// fail with an error that matches case.Want. It needs no host, so config
// should point the provider at a socket that does not exist (a dial would
// fail differently).
func ExpectPlanErrors(t *testing.T, factories map[string]func() (tfprotov6.ProviderServer, error), config func(body string) string, cases map[string]PlanError) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      config(tc.Body),
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(tc.Want),
				}},
			})
		})
	}
}
