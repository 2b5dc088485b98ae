package release

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// fakeModule writes a module whose main prints main.version, so the
// layout is tested without compiling the provider for every platform.
func fakeModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                           "module example.com/fake\n\ngo 1.22\n",
		"main.go":                          "package main\n\nvar version = \"dev\"\n\nfunc main() { println(version) }\n",
		"terraform-registry-manifest.json": "{\"version\":1,\"metadata\":{\"protocol_versions\":[\"6.0\"]}}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testKey(t *testing.T) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity("Kohaku test release", "", "release@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var here = Platform{runtime.GOOS, runtime.GOARCH}

func TestBuild_layoutSumsAndSignature(t *testing.T) {
	t.Parallel()
	mod := fakeModule(t)
	key := testKey(t)
	other := Platform{"windows", "arm64"}
	a, err := Build(context.Background(), Options{Version: "1.2.3-rc.1", Module: mod, Out: t.TempDir(),
		Platforms: []Platform{here, other}, Signer: key})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"terraform-provider-kohaku_1.2.3-rc.1_" + here.String() + ".zip",
		"terraform-provider-kohaku_1.2.3-rc.1_windows_arm64.zip",
		"terraform-provider-kohaku_1.2.3-rc.1_manifest.json",
		"terraform-provider-kohaku_1.2.3-rc.1_SHA256SUMS",
		"terraform-provider-kohaku_1.2.3-rc.1_SHA256SUMS.sig",
	}
	for _, name := range want {
		if _, err := os.Stat(filepath.Join(a.Out, name)); err != nil {
			t.Errorf("the release lacks %s: %v", name, err)
		}
	}
	if err := Verify(a, openpgp.EntityList{key}); err != nil {
		t.Fatalf("a fresh release does not verify: %v", err)
	}
	sums, _ := os.ReadFile(filepath.Join(a.Out, a.Sums))
	got, err := ReadSums(sums)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[a.Manifest] == "" {
		t.Errorf("SHA256SUMS covers %v, want the two zips and the manifest", got)
	}

	// Each zip holds exactly the versioned binary, executable; the one for
	// this machine runs and reports the version it was stamped with.
	for p, name := range a.Zips {
		zr, err := zip.OpenReader(filepath.Join(a.Out, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(zr.File) != 1 || zr.File[0].Name != BinaryName("1.2.3-rc.1", p) || zr.File[0].Mode()&0o111 == 0 {
			t.Errorf("%s holds %v, want one executable %s", name, zr.File, BinaryName("1.2.3-rc.1", p))
		}
		if p == here {
			bin := filepath.Join(t.TempDir(), "bin")
			rc, _ := zr.File[0].Open()
			var b bytes.Buffer
			_, _ = b.ReadFrom(rc)
			rc.Close()
			if err := os.WriteFile(bin, b.Bytes(), 0o755); err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command(bin).CombinedOutput()
			if strings.TrimSpace(string(out)) != "1.2.3-rc.1" {
				t.Errorf("the binary reports version %q, want 1.2.3-rc.1", out)
			}
		}
		zr.Close()
	}
	if strings.HasSuffix(a.Zips[other], ".exe") || !strings.HasSuffix(BinaryName("1", other), ".exe") {
		t.Errorf("a windows binary is named %s", BinaryName("1", other))
	}

	// Tampering is caught: a changed zip, and a signature by another key.
	if err := Verify(a, openpgp.EntityList{testKey(t)}); err == nil {
		t.Error("a signature checked against another key verified")
	}
	zipFile := filepath.Join(a.Out, a.Zips[here])
	b, _ := os.ReadFile(zipFile)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(zipFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(a, openpgp.EntityList{key}); err == nil || !strings.Contains(err.Error(), a.Zips[here]) {
		t.Errorf("a changed zip: Verify says %v, want an error naming it", err)
	}
}

// Two builds of one source give byte-identical archives and sums, so a
// release can be rebuilt and compared.
func TestBuild_reproducible(t *testing.T) {
	t.Parallel()
	mod := fakeModule(t)
	var sums [2][]byte
	for i := range sums {
		a, err := Build(context.Background(), Options{Version: "0.1.0", Module: mod, Out: t.TempDir(), Platforms: []Platform{here}})
		if err != nil {
			t.Fatal(err)
		}
		if a.Sig != "" {
			t.Error("a build without a signer wrote a signature")
		}
		sums[i], _ = os.ReadFile(filepath.Join(a.Out, a.Sums))
	}
	if !bytes.Equal(sums[0], sums[1]) {
		t.Errorf("two builds differ:\n%s\n%s", sums[0], sums[1])
	}
}

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{
		"0.1.0": true, "1.20.3": true, "0.2.0-rc.1": true,
		"v0.1.0": false, "0.1": false, "01.0.0": false, "": false, "0.1.0+abc": false, "dev": false,
	} {
		if err := CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
	if _, err := Build(context.Background(), Options{Version: "v1.0.0"}); err == nil || !strings.Contains(err.Error(), "no leading v") {
		t.Errorf("Build with v1.0.0: %v, want the version refused with what is right", err)
	}
}

func TestNetworkMirror_layout(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	a := &Artifacts{Version: "0.2.0", Out: out, Zips: map[Platform]string{}}
	for _, p := range []Platform{{"linux", "amd64"}, {"darwin", "arm64"}} {
		a.Zips[p] = ZipName("0.2.0", p)
		if err := os.WriteFile(filepath.Join(out, a.Zips[p]), []byte("zip of "+p.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mirror := t.TempDir()
	// An earlier version already in the mirror stays listed.
	old := filepath.Join(mirror, "registry.terraform.io", "kohaku", "kohaku")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "index.json"), []byte(`{"versions":{"0.1.0":{}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := NetworkMirror(a, mirror); err != nil {
		t.Fatal(err)
	}
	for _, host := range Hosts {
		dir := filepath.Join(mirror, host, "kohaku", "kohaku")
		var index struct {
			Versions map[string]any `json:"versions"`
		}
		b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
		if err := json.Unmarshal(b, &index); err != nil || index.Versions["0.2.0"] == nil {
			t.Errorf("%s index.json = %s (%v), want 0.2.0 listed", host, b, err)
		}
		if host == "registry.terraform.io" && index.Versions["0.1.0"] == nil {
			t.Errorf("the earlier version is gone from the index: %s", b)
		}
		var ver struct {
			Archives map[string]struct {
				URL    string   `json:"url"`
				Hashes []string `json:"hashes"`
			} `json:"archives"`
		}
		b, _ = os.ReadFile(filepath.Join(dir, "0.2.0.json"))
		if err := json.Unmarshal(b, &ver); err != nil {
			t.Fatal(err)
		}
		for p, name := range a.Zips {
			arch := ver.Archives[p.String()]
			sum, _ := a.ZipSHA256(p)
			if arch.URL != name || len(arch.Hashes) != 1 || arch.Hashes[0] != "zh:"+sum {
				t.Errorf("%s %s: %+v, want url %s and hash zh:%s", host, p, arch, name, sum)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != "zip of "+p.String() {
				t.Errorf("%s: the zip beside the index holds %q", host, got)
			}
		}
	}
}

func TestInstallLocal(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "provider")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := InstallLocal(bin, dir, "0.1.0", Platform{"linux", "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "registry.terraform.io/kohaku/kohaku/0.1.0/linux_amd64/terraform-provider-kohaku_v0.1.0"),
		filepath.Join(dir, "registry.opentofu.org/kohaku/kohaku/0.1.0/linux_amd64/terraform-provider-kohaku_v0.1.0"),
	}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("installed %v, want %v", paths, want)
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want an executable file", p, fi, err)
		}
	}
	if _, err := InstallLocal(bin, dir, "dev", Platform{"linux", "amd64"}); err == nil {
		t.Error("a version Terraform cannot select was installed")
	}
}

// .goreleaser.yml and DefaultPlatforms name the same platforms, so make
// release and a goreleaser release publish the same set.
func TestGoreleaserPlatformsMatch(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../.goreleaser.yml")
	if err != nil {
		t.Fatal(err)
	}
	var goos, goarch, ignores []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "goos: ["):
			goos = strings.Split(strings.Trim(strings.TrimPrefix(line, "goos: "), "[]"), ", ")
		case strings.HasPrefix(line, "goarch: ["):
			goarch = strings.Split(strings.Trim(strings.TrimPrefix(line, "goarch: "), "[]"), ", ")
		case strings.HasPrefix(line, "- goos: "):
			ignores = append(ignores, strings.TrimPrefix(line, "- goos: "))
		case strings.HasPrefix(line, "goarch: ") && len(ignores) > 0 && !strings.Contains(ignores[len(ignores)-1], "_"):
			ignores[len(ignores)-1] += "_" + strings.Trim(strings.TrimPrefix(line, "goarch: "), `"`)
		}
	}
	skip := map[string]bool{}
	for _, s := range ignores {
		skip[s] = true
	}
	var got []string
	for _, o := range goos {
		for _, a := range goarch {
			if !skip[o+"_"+a] {
				got = append(got, o+"_"+a)
			}
		}
	}
	var want []string
	for _, p := range DefaultPlatforms {
		want = append(want, p.String())
	}
	gs, ws := strings.Join(sortedCopy(got), " "), strings.Join(sortedCopy(want), " ")
	if gs != ws {
		t.Errorf(".goreleaser.yml builds %s; DefaultPlatforms is %s", gs, ws)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
