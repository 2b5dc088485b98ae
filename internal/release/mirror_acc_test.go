package release

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"golang.org/x/mod/sumdb/dirhash"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The release as a user installs it: make release's layout (here for this
// machine and one other platform, signed by a throwaway key), served on
// 127.0.0.1 over HTTPS as a provider network mirror, installed by
// `terraform init` and by `tofu init` through a provider_installation {
// network_mirror } block with no dev_overrides, beside the built-in
// terraform_data. Every hash the lock file records is one of the zips'
// (zh: their SHA-256, h1: their contents'); `providers lock -platform=...`
// records both platforms; the installed provider plans against the test
// host.
func TestAccRelease_networkMirror(t *testing.T) {
	uri := acctest.URI(t)
	clis := map[string]string{"terraform": acctest.CLI()}
	if tofu := os.Getenv("KOHAKU_TEST_TOFU"); tofu != "" {
		clis["tofu"] = tofu
	} else if os.Getenv("KOHAKU_REQUIRE_TOOLS") != "" {
		t.Fatal("KOHAKU_TEST_TOFU (the OpenTofu binary, internal/acctest/tofu/tofu.sh path) is not set")
	} else {
		t.Log("KOHAKU_TEST_TOFU is not set: the OpenTofu half is skipped")
	}
	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	ver := strings.TrimSpace(string(version))
	key, err := openpgp.NewEntity("Kohaku acceptance release", "", "release@example.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	other := Platform{"darwin", "arm64"}
	a, err := Build(context.Background(), Options{Version: ver, Module: "../..", Out: t.TempDir(),
		Platforms: []Platform{here, other}, Signer: key, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(a, openpgp.EntityList{key}); err != nil {
		t.Fatal(err)
	}
	mirror := t.TempDir()
	if err := NetworkMirror(a, mirror); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(mirror)))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(t.TempDir(), "cli.rc")
	if err := os.WriteFile(rc, []byte(fmt.Sprintf(
		"provider_installation {\n  network_mirror {\n    url     = %q\n    include = [%s]\n  }\n  direct {\n    exclude = [%[2]s]\n  }\n}\n",
		srv.URL+"/", `"registry.terraform.io/kohaku/kohaku", "registry.opentofu.org/kohaku/kohaku"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	// What a lock file may hold for each zip: zh: is its SHA-256, h1: the
	// hash of its contents (Terraform's dirhash over the unpacked files).
	zh, h1 := map[Platform]string{}, map[Platform]string{}
	for p, name := range a.Zips {
		sum, err := a.ZipSHA256(p)
		if err != nil {
			t.Fatal(err)
		}
		zh[p] = "zh:" + sum
		if h1[p], err = dirhash.HashZip(filepath.Join(a.Out, name), dirhash.Hash1); err != nil {
			t.Fatal(err)
		}
	}
	// ours checks that every hash in a lock is one of this release's, and
	// that the lock has the h1: of each platform given.
	ours := func(t *testing.T, what string, lock lockFile, platforms ...Platform) {
		t.Helper()
		known := map[string]bool{}
		for p := range a.Zips {
			known[zh[p]], known[h1[p]] = true, true
		}
		for _, h := range lock.hashes {
			if !known[h] {
				t.Errorf("%s: the lock file has %s, which is no hash of this release's zips", what, h)
			}
		}
		for _, p := range platforms {
			if !lock.has(h1[p]) {
				t.Errorf("%s: the lock file lacks %s's %s; it has %v", what, p, h1[p], lock.hashes)
			}
		}
	}

	config := fmt.Sprintf(`terraform {
  required_providers {
    kohaku = {
      source  = "kohaku/kohaku"
      version = %q
    }
  }
}

provider "kohaku" {
  uri = %q
}

data "kohaku_host" "this" {}

resource "terraform_data" "beside" {
  input = data.kohaku_host.this.hostname
}

output "address" {
  value = provider::kohaku::pci_address("3b:00.0")
}
`, ver, uri)

	names := make([]string, 0, len(clis))
	for n := range clis {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		cli := clis[name]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
			run := func(args ...string) string {
				t.Helper()
				cmd := exec.Command(cli, args...)
				cmd.Dir = dir
				// A HOME of its own: no implied local mirror (make install's)
				// and no CLI config of the machine's takes part.
				cmd.Env = append(cleanEnv(), "HOME="+t.TempDir(), "TF_CLI_CONFIG_FILE="+rc, "SSL_CERT_FILE="+ca,
					"TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			run("init", "-input=false", "-no-color")
			lock := readLock(t, dir)
			if !strings.Contains(lock.version, ver) {
				t.Errorf("the lock file records version %q, want %s", lock.version, ver)
			}
			ours(t, "init", lock, here)
			out := run("plan", "-input=false", "-no-color")
			if !strings.Contains(out, `"0000:3b:00.0"`) || !strings.Contains(out, "terraform_data.beside will be created") {
				t.Errorf("the plan with the installed provider lacks the function's value or the resource beside it:\n%s", out)
			}

			// Every platform's package hash, as a team with several
			// workstation kinds records them.
			if err := os.Remove(filepath.Join(dir, ".terraform.lock.hcl")); err != nil {
				t.Fatal(err)
			}
			run("providers", "lock", "-no-color", "-net-mirror="+srv.URL+"/", "-platform="+here.String(), "-platform="+other.String())
			ours(t, "providers lock", readLock(t, dir), here, other)
		})
	}
}

// cleanEnv is the test's environment without what would point the CLI at
// another configuration or provider.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "TF_") || k == "HOME" || k == "SSL_CERT_FILE" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

type lockFile struct {
	version string
	hashes  []string
}

func (l lockFile) has(h string) bool {
	for _, x := range l.hashes {
		if x == h {
			return true
		}
	}
	return false
}

var lockBlockRE = regexp.MustCompile(`(?s)provider "[^"]*/kohaku/kohaku" \{(.*?)\n\}`)

// readLock reads kohaku's block of a .terraform.lock.hcl.
func readLock(t *testing.T, dir string) lockFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	m := lockBlockRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("the lock file has no kohaku/kohaku block:\n%s", b)
	}
	var l lockFile
	if v := regexp.MustCompile(`version\s*=\s*"([^"]*)"`).FindSubmatch(m[1]); v != nil {
		l.version = string(v[1])
	}
	for _, h := range regexp.MustCompile(`"((?:h1|zh):[^"]+)"`).FindAllSubmatch(m[1], -1) {
		l.hashes = append(l.hashes, string(h[1]))
	}
	return l
}
