package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The tls transport against the test host's libvirtd, which listens for
// TLS on 127.0.0.1:16514 with a throwaway PKI (testhost.sh ensure_pki) and
// checks client certificates against its CA.

func tlsConfig(uri, pki string) string {
	return fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  tls = {
    pki_path = %q
  }
}
data "kohaku_host" "this" {}
`, uri, pki)
}

func TestAccHostDataSource_tls(t *testing.T) {
	local := acctest.URI(t)
	uri := acctest.Env(t, "KOHAKU_TEST_TLS_URI")
	pki := acctest.Env(t, "KOHAKU_TEST_TLS_PKI")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            tlsConfig(uri, pki),
			ConfigStateChecks: hostChecks(t, local, "data.kohaku_host.this"),
			Check: resource.ComposeAggregateTestCheckFunc(
				poolCheck("data.kohaku_host.this"),
				resource.TestCheckResourceAttr("data.kohaku_host.this", "uri", uri),
			),
		}},
	})
}

// tlsRefused applies a kohaku_host over TLS with the client files in pki
// and expects the error want.
func tlsRefused(t *testing.T, pki string, want *regexp.Regexp) {
	t.Helper()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps:                    []resource.TestStep{{Config: tlsConfig(acctest.Env(t, "KOHAKU_TEST_TLS_URI"), pki), ExpectError: want}},
	})
}

// A client certificate from a CA libvirtd does not trust: libvirtd ends
// the session after the handshake, and the diagnostic says it refused the
// certificate and names the file.
func TestAccHostDataSource_tlsRefusedClientCert(t *testing.T) {
	stranger := acctest.Env(t, "KOHAKU_TEST_TLS_STRANGER_PKI")
	tlsRefused(t, stranger, regexp.MustCompile(`(?s)transport tls.*libvirtd\s+refused\s+the\s+client\s+certificate\s+`+
		regexp.QuoteMeta(filepath.Join(stranger, "clientcert.pem"))+`.*CN=kohaku-stranger.*ca_file`))
}

// A cacert.pem that did not sign libvirtd's certificate: refused on our
// side, and the diagnostic says the server is not trusted.
func TestAccHostDataSource_tlsUntrustedServer(t *testing.T) {
	pki := untrustingPKI(t)
	tlsRefused(t, pki, regexp.MustCompile(`(?s)transport tls.*certificate\s+of\s+127\.0\.0\.1:16514\s+is\s+not\s+trusted.*`+
		regexp.QuoteMeta(filepath.Join(pki, "cacert.pem"))))
}

// no_verify against a libvirtd whose certificate the client does not
// trust (its cacert.pem is another CA's): the same files are refused
// without the flag and connect with it; libvirtd still checks the client
// certificate, so the session is real.
func TestAccHostDataSource_tlsNoVerify(t *testing.T) {
	local := acctest.URI(t)
	uri := acctest.Env(t, "KOHAKU_TEST_TLS_URI")
	pki := untrustingPKI(t)
	noVerify := fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  tls = {
    pki_path  = %q
    no_verify = true
  }
}
data "kohaku_host" "this" {}
`, uri, pki)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{Config: tlsConfig(uri, pki), ExpectError: regexp.MustCompile(`(?s)certificate\s+of\s+127\.0\.0\.1:16514\s+is\s+not\s+trusted`)},
			{
				Config:            noVerify,
				ConfigStateChecks: hostChecks(t, local, "data.kohaku_host.this"),
				Check:             resource.TestCheckResourceAttr("data.kohaku_host.this", "uri", uri),
			},
		},
	})
}

// A pki_path without the client files fails before dialing, naming the
// files that are missing.
func TestAccHostDataSource_tlsMissingFiles(t *testing.T) {
	acctest.URI(t)
	pki := t.TempDir()
	tlsRefused(t, pki, regexp.MustCompile(`(?s)transport tls.*`+regexp.QuoteMeta(filepath.Join(pki, "clientcert.pem"))+`.*tls\.pki_path`))
}

// untrustingPKI is a pki_path with the test host's good client
// certificate and key, and the cacert.pem of a CA that did not sign
// libvirtd's certificate.
func untrustingPKI(t *testing.T) string {
	t.Helper()
	good := acctest.Env(t, "KOHAKU_TEST_TLS_PKI")
	pki := t.TempDir()
	for _, f := range []string{"clientcert.pem", "clientkey.pem"} {
		b, err := os.ReadFile(filepath.Join(good, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pki, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeOtherCA(t, filepath.Join(pki, "cacert.pem"))
	return pki
}

// writeOtherCA writes a self-signed CA certificate nobody used to sign
// anything.
func writeOtherCA(t *testing.T, file string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Some other CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
