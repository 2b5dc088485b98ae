package provider

import (
	"fmt"
	"os/exec"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

// protoV6Providers serves the provider in-process to Terraform in tests.
var protoV6Providers = map[string]func() (tfprotov6.ProviderServer, error){
	"kohaku": providerserver.NewProtocol6WithError(New("test")()),
}

// virshVersion returns what `virsh version` reports for the daemon and the
// hypervisor: an independent reading to check ours against.
func virshVersion(t *testing.T, uri string) (daemon, hypervisor string) {
	t.Helper()
	out, err := exec.Command("virsh", "-c", uri, "version", "--daemon").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh -c %s version: %v\n%s", uri, err, out)
	}
	d := regexp.MustCompile(`Running against daemon: (\S+)`).FindSubmatch(out)
	h := regexp.MustCompile(`Running hypervisor: \S+ (\S+)`).FindSubmatch(out)
	if d == nil || h == nil {
		t.Fatalf("cannot read versions from virsh output:\n%s", out)
	}
	return string(d[1]), string(h[1])
}

func providerBlock(uri string) string {
	return fmt.Sprintf("provider \"kohaku\" {\n  uri = %q\n}\n", uri)
}

// compareSame passes when two state values are equal.
type compareSame struct{}

func (compareSame) CompareValues(values ...any) error {
	for _, v := range values[1:] {
		if fmt.Sprint(v) != fmt.Sprint(values[0]) {
			return fmt.Errorf("values differ: %v and %v", values[0], v)
		}
	}
	return nil
}
