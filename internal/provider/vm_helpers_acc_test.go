package provider

import (
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// vmTestPrefix returns a name prefix unique to one test (acctest.Prefix)
// whose cleanup sweeps the test's domains and volumes with the provider's
// own sweeper.
func vmTestPrefix(t *testing.T, env acctest.VMEnv, short string) string {
	t.Helper()
	return acctest.Prefix(t, short, func(prefix string) error {
		return sweepVMs(env.URI, prefix, env.Pool, "default")
	})
}

// vmClient dials the test host directly, for checks that need the provider's
// own libvirt layer (RPC counts).
func vmClient(t *testing.T, uri string) *virt.Client {
	t.Helper()
	c, err := virt.New(virt.Settings{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
