package release

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Namespace and Type are the provider's registry address parts: its source
// is kohaku/kohaku on either registry.
const (
	Namespace = "kohaku"
	Type      = "kohaku"
)

// Hosts are the registry hostnames the short source kohaku/kohaku resolves
// to: Terraform's and OpenTofu's.
var Hosts = []string{"registry.terraform.io", "registry.opentofu.org"}

// NetworkMirror lays the release out for the provider network mirror
// protocol both CLIs speak (provider_installation { network_mirror { url =
// ... } }): for each host, HOST/kohaku/kohaku/index.json lists the
// versions, HOST/kohaku/kohaku/VERSION.json the archives with their zh:
// hashes, and the zips sit beside them (their URLs are relative). Serve dir
// over HTTPS; a mirror may hold several versions, so an existing index is
// extended, not replaced.
func NetworkMirror(a *Artifacts, dir string) error {
	type archive struct {
		URL    string   `json:"url"`
		Hashes []string `json:"hashes"`
	}
	archives := map[string]archive{}
	for p, name := range a.Zips {
		sum, err := a.ZipSHA256(p)
		if err != nil {
			return err
		}
		archives[p.String()] = archive{URL: name, Hashes: []string{"zh:" + sum}}
	}
	for _, host := range Hosts {
		pdir := filepath.Join(dir, host, Namespace, Type)
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return err
		}
		for _, name := range a.Zips {
			if err := copyFile(filepath.Join(a.Out, name), filepath.Join(pdir, name)); err != nil {
				return err
			}
		}
		if err := writeJSON(filepath.Join(pdir, a.Version+".json"), map[string]any{"archives": archives}); err != nil {
			return err
		}
		index := struct {
			Versions map[string]struct{} `json:"versions"`
		}{Versions: map[string]struct{}{}}
		if b, err := os.ReadFile(filepath.Join(pdir, "index.json")); err == nil {
			if err := json.Unmarshal(b, &index); err != nil {
				return fmt.Errorf("the mirror's existing index.json: %w", err)
			}
			if index.Versions == nil {
				index.Versions = map[string]struct{}{}
			}
		}
		index.Versions[a.Version] = struct{}{}
		if err := writeJSON(filepath.Join(pdir, "index.json"), index); err != nil {
			return err
		}
	}
	return nil
}

// LocalMirrorPath is where a provider binary goes in a filesystem mirror
// directory (an implied local mirror such as ~/.terraform.d/plugins) in the
// unpacked layout: HOST/kohaku/kohaku/VERSION/OS_ARCH/BINARY.
func LocalMirrorPath(dir, host, version string, p Platform) string {
	return filepath.Join(dir, host, Namespace, Type, version, p.String(), BinaryName(version, p))
}

// InstallLocal copies a built provider binary into dir's unpacked layout
// for each of Hosts, so that `terraform init` and `tofu init` find
// kohaku/kohaku there without dev_overrides. It returns the paths written.
func InstallLocal(bin, dir, version string, p Platform) ([]string, error) {
	if err := CheckVersion(version); err != nil {
		return nil, err
	}
	var out []string
	for _, host := range Hosts {
		dst := LocalMirrorPath(dir, host, version, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if err := copyFile(bin, dst); err != nil {
			return nil, err
		}
		if err := os.Chmod(dst, 0o755); err != nil {
			return nil, err
		}
		out = append(out, dst)
	}
	return out, nil
}

func writeJSON(file string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// copyFile writes src to dst through a temporary file and a rename, so a
// CLI reading dst never sees half a file.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst))
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
