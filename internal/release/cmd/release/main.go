// Command release builds Kohaku's release artifacts (make release) and
// installs a build where `terraform init` and `tofu init` find it (make
// install). Run it from the module root:
//
//	go run ./internal/release/cmd/release build -version 0.1.0 -out dist [-platforms linux_amd64,...] [-key FILE]
//	go run ./internal/release/cmd/release install -version 0.1.0 -bin bin/terraform-provider-kohaku [-dir DIR]
//	go run ./internal/release/cmd/release mirror -version 0.1.0 -out dist -dir MIRROR
//
// build signs SHA256SUMS with the armored OpenPGP private key in -key (or
// KOHAKU_GPG_KEY_FILE; its passphrase, if any, in KOHAKU_GPG_PASSPHRASE);
// without one the release is unsigned and says so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/kohaku/terraform-provider-kohaku/internal/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release build|install|mirror [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	version := fs.String("version", "", "the version, MAJOR.MINOR.PATCH[-PRERELEASE]")
	out := fs.String("out", "dist", "the release directory")
	switch args[0] {
	case "build":
		platforms := fs.String("platforms", "", "comma-separated OS_ARCH list (default: every release platform)")
		key := fs.String("key", os.Getenv("KOHAKU_GPG_KEY_FILE"), "armored OpenPGP private key that signs SHA256SUMS")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		o := release.Options{Version: *version, Module: ".", Out: *out,
			Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
		if *platforms != "" {
			for _, s := range strings.Split(*platforms, ",") {
				p, err := release.ParsePlatform(strings.TrimSpace(s))
				if err != nil {
					return err
				}
				o.Platforms = append(o.Platforms, p)
			}
		}
		if *key != "" {
			e, err := readKey(*key, os.Getenv("KOHAKU_GPG_PASSPHRASE"))
			if err != nil {
				return err
			}
			o.Signer = e
		}
		a, err := release.Build(context.Background(), o)
		if err != nil {
			return err
		}
		if err := release.Verify(a, nil); err != nil {
			return err
		}
		fmt.Printf("release: %d archives, %s and %s in %s\n", len(a.Zips), a.Manifest, a.Sums, a.Out)
		if a.Sig == "" {
			fmt.Println("release: UNSIGNED (no -key / KOHAKU_GPG_KEY_FILE): fine for a local mirror, not for a registry")
		} else {
			fmt.Printf("release: signed: %s\n", a.Sig)
		}
		return nil
	case "install":
		bin := fs.String("bin", "bin/"+release.Project, "the provider binary built for this machine")
		home, _ := os.UserHomeDir()
		dir := fs.String("dir", filepath.Join(home, ".terraform.d", "plugins"), "the filesystem mirror directory")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		paths, err := release.InstallLocal(*bin, *dir, *version, release.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH})
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Println("installed", p)
		}
		return nil
	case "mirror":
		dir := fs.String("dir", "", "the network mirror's document root")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		a, err := readArtifacts(*out, *version)
		if err != nil {
			return err
		}
		return release.NetworkMirror(a, *dir)
	}
	return fmt.Errorf("unknown command %q: want build, install or mirror", args[0])
}

func readKey(file, passphrase string) (*openpgp.Entity, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := openpgp.ReadArmoredKeyRing(f)
	if err != nil {
		return nil, fmt.Errorf("reading the signing key %s: %w", file, err)
	}
	e := ents[0]
	if e.PrivateKey == nil {
		return nil, fmt.Errorf("%s holds no private key", file)
	}
	if e.PrivateKey.Encrypted {
		if err := e.PrivateKey.Decrypt([]byte(passphrase)); err != nil {
			return nil, fmt.Errorf("unlocking the signing key (KOHAKU_GPG_PASSPHRASE): %w", err)
		}
	}
	return e, nil
}

// readArtifacts finds a built release's zips in dir.
func readArtifacts(dir, version string) (*release.Artifacts, error) {
	a := &release.Artifacts{Version: version, Out: dir, Zips: map[release.Platform]string{}}
	for _, p := range release.DefaultPlatforms {
		name := release.ZipName(version, p)
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			a.Zips[p] = name
		}
	}
	if len(a.Zips) == 0 {
		return nil, fmt.Errorf("no %s archives of version %s in %s: run build first", release.Project, version, dir)
	}
	return a, nil
}
