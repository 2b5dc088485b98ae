package provider

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// Signing keys and the signature URL are checked at plan time, on their
// own lines, before anything is fetched.
func TestImage_signingValidation(t *testing.T) {
	t.Parallel()
	e, err := openpgp.NewEntity("vendor", "", "vendor@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	var pub bytes.Buffer
	w, _ := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	key := fmt.Sprintf("<<-EOT\n%s\nEOT", pub.String())
	const (
		src  = `source = "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2"`
		sums = `checksum_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"`
		sig  = `checksum_signature_url = "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS.sign"`
	)
	for _, c := range []struct{ config, want string }{
		{sums + "\n  checksum_signing_keys = \"ssh-ed25519 AAAA\"", `(?s)Invalid signing keys.*checksum_signing_keys.*ASCII-armored`},
		{sums + "\n  checksum_signing_keys = \"-----BEGIN PGP PRIVATE KEY BLOCK-----\\n\"", `(?s)Invalid signing keys.*private\s+key\s+block`},
		{sums + "\n  " + sig, `(?s)checksum_signing_keys.*must\s+be\s+specified`},
		{"checksum_signing_keys = " + key, `(?s)checksum_url.*must\s+be\s+specified`},
		{sig + "\n  checksum_signing_keys = " + key, `(?s)checksum_url.*must\s+be\s+specified`},
		{sums + "\n  " + sig + "\n  checksum_signing_keys = " + key, ``},
		{sums + "\n  checksum_signing_keys = " + key, ``},
	} {
		step := resource.TestStep{
			Config: providerBlock("test:///default") + "resource \"kohaku_image\" \"x\" {\n  pool = \"default\"\n  name = \"d.qcow2\"\n  " +
				src + "\n  " + c.config + "\n}\n",
			PlanOnly: true,
		}
		if c.want == "" {
			step.ExpectNonEmptyPlan = true
		} else {
			step.ExpectError = regexp.MustCompile(c.want)
		}
		resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: protoV6Providers, Steps: []resource.TestStep{step}})
	}
}
