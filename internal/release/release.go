package release

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// Project is the provider's binary and archive name prefix, as the
// Terraform Registry requires (terraform-provider-TYPE).
const Project = "terraform-provider-kohaku"

// Platform is one OS and architecture a release is built for.
type Platform struct{ OS, Arch string }

// String is the platform as Terraform writes it (linux_amd64).
func (p Platform) String() string { return p.OS + "_" + p.Arch }

// ParsePlatform reads "os_arch".
func ParsePlatform(s string) (Platform, error) {
	goos, arch, ok := strings.Cut(s, "_")
	if !ok || goos == "" || arch == "" || strings.Contains(arch, "_") {
		return Platform{}, fmt.Errorf("platform %q: want OS_ARCH, for example linux_amd64", s)
	}
	return Platform{goos, arch}, nil
}

// DefaultPlatforms are the platforms a release is built for: what the
// Terraform Registry's users run Terraform on. .goreleaser.yml lists the
// same (a test holds the two together).
var DefaultPlatforms = []Platform{
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"freebsd", "amd64"},
	{"linux", "amd64"}, {"linux", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

var versionRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// CheckVersion refuses a version Terraform cannot select: it must be
// semantic (MAJOR.MINOR.PATCH, optionally -PRERELEASE), without a leading v.
func CheckVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q is not MAJOR.MINOR.PATCH[-PRERELEASE] (for example 0.1.0 or 0.2.0-rc.1, no leading v)", v)
	}
	return nil
}

// Options say what Build makes.
type Options struct {
	Version   string     // the release's version, e.g. 0.1.0
	Module    string     // the provider's module root (go build runs there)
	Out       string     // the directory the artifacts are written to (made if missing)
	Platforms []Platform // default DefaultPlatforms
	Manifest  string     // terraform-registry-manifest.json; default Module's
	// Signer signs SHA256SUMS (a detached binary signature, as the registry
	// wants); nil leaves the release unsigned (Artifacts.Sig is "").
	Signer *openpgp.Entity
	// Modified is the time stamped on every zip entry, so two builds of one
	// commit give identical zips; default 2000-01-01.
	Modified time.Time
	Log      func(format string, args ...any)
}

// Artifacts are the files Build wrote, by name, in Out.
type Artifacts struct {
	Version  string
	Out      string
	Zips     map[Platform]string
	Manifest string
	Sums     string
	Sig      string
}

// ZipSHA256 returns the hex SHA-256 of a platform's zip.
func (a *Artifacts) ZipSHA256(p Platform) (string, error) {
	return fileSHA256(filepath.Join(a.Out, a.Zips[p]))
}

// BinaryName is the provider binary's name inside a platform's zip.
func BinaryName(version string, p Platform) string {
	name := Project + "_v" + version
	if p.OS == "windows" {
		name += ".exe"
	}
	return name
}

// ZipName is a platform's archive name.
func ZipName(version string, p Platform) string {
	return fmt.Sprintf("%s_%s_%s.zip", Project, version, p)
}

// Build cross-compiles the provider for each platform (static, -trimpath,
// the version stamped into main.version), zips each binary, copies the
// registry manifest, writes SHA256SUMS over all of them and signs it.
func Build(ctx context.Context, o Options) (*Artifacts, error) {
	if err := CheckVersion(o.Version); err != nil {
		return nil, err
	}
	if o.Platforms == nil {
		o.Platforms = DefaultPlatforms
	}
	if o.Manifest == "" {
		o.Manifest = filepath.Join(o.Module, "terraform-registry-manifest.json")
	}
	if o.Modified.IsZero() {
		o.Modified = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "kohaku-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	a := &Artifacts{Version: o.Version, Out: o.Out, Zips: map[Platform]string{}}
	for _, p := range o.Platforms {
		bin := filepath.Join(tmp, p.String(), BinaryName(o.Version, p))
		o.Log("release: building %s", p)
		if err := goBuild(ctx, o.Module, bin, o.Version, p); err != nil {
			return nil, err
		}
		a.Zips[p] = ZipName(o.Version, p)
		if err := writeZip(filepath.Join(o.Out, a.Zips[p]), bin, o.Modified); err != nil {
			return nil, fmt.Errorf("zipping %s: %w", p, err)
		}
	}
	manifest, err := os.ReadFile(o.Manifest)
	if err != nil {
		return nil, fmt.Errorf("reading the registry manifest: %w", err)
	}
	a.Manifest = fmt.Sprintf("%s_%s_manifest.json", Project, o.Version)
	if err := os.WriteFile(filepath.Join(o.Out, a.Manifest), manifest, 0o644); err != nil {
		return nil, err
	}
	sums, err := sumsFile(o.Out, append(zipNames(a), a.Manifest))
	if err != nil {
		return nil, err
	}
	a.Sums = fmt.Sprintf("%s_%s_SHA256SUMS", Project, o.Version)
	if err := os.WriteFile(filepath.Join(o.Out, a.Sums), sums, 0o644); err != nil {
		return nil, err
	}
	if o.Signer != nil {
		var sig bytes.Buffer
		if err := openpgp.DetachSign(&sig, o.Signer, bytes.NewReader(sums), nil); err != nil {
			return nil, fmt.Errorf("signing %s: %w", a.Sums, err)
		}
		a.Sig = a.Sums + ".sig"
		if err := os.WriteFile(filepath.Join(o.Out, a.Sig), sig.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func zipNames(a *Artifacts) []string {
	var out []string
	for _, n := range a.Zips {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func goBuild(ctx context.Context, module, out, version string, p Platform) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, ".")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, b)
	}
	return nil
}

// writeZip writes one binary into a zip, executable, stamped with mod.
func writeZip(file, bin string, mod time.Time) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	h := &zip.FileHeader{Name: filepath.Base(bin), Method: zip.Deflate, Modified: mod}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err == nil {
		var src *os.File
		if src, err = os.Open(bin); err == nil {
			_, err = io.Copy(w, src)
			src.Close()
		}
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sumsFile is sha256sum's output over names in dir, sorted by name.
func sumsFile(dir string, names []string) ([]byte, error) {
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return b.Bytes(), nil
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ReadSums parses a SHA256SUMS file into name -> hex digest.
func ReadSums(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || name == "" {
			return nil, fmt.Errorf("SHA256SUMS line %d: want \"<64 hex digits>  <name>\", got %q", i+1, line)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("SHA256SUMS line %d: %w", i+1, err)
		}
		out[name] = sum
	}
	return out, nil
}

// Verify checks a release directory as a user or a mirror would: the
// signature over SHA256SUMS by keyring (when keyring is not nil), and every
// file SHA256SUMS names against its digest.
func Verify(a *Artifacts, keyring openpgp.EntityList) error {
	sums, err := os.ReadFile(filepath.Join(a.Out, a.Sums))
	if err != nil {
		return err
	}
	if keyring != nil {
		if a.Sig == "" {
			return errors.New("the release is not signed")
		}
		sig, err := os.ReadFile(filepath.Join(a.Out, a.Sig))
		if err != nil {
			return err
		}
		if _, err := openpgp.CheckDetachedSignature(keyring, bytes.NewReader(sums), bytes.NewReader(sig), nil); err != nil {
			return fmt.Errorf("the signature over %s does not verify: %w", a.Sums, err)
		}
	}
	want, err := ReadSums(sums)
	if err != nil {
		return err
	}
	for name, sum := range want {
		got, err := fileSHA256(filepath.Join(a.Out, name))
		if err != nil {
			return err
		}
		if got != sum {
			return fmt.Errorf("%s: SHA-256 %s, SHA256SUMS says %s", name, got, sum)
		}
	}
	return nil
}
