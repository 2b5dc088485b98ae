package acctest

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The host scripts name each cached image by a key that hashes exactly the
// files its recipe reads (and the mirror it is built from). These tests read
// the keys by sourcing the scripts, as a build would compute them, from a
// copy of internal/acctest, edit one file at a time, and check which keys
// moved: an edit rebuilds the images built from that file and no other.

// imageKeys sources the host scripts under root and returns every image's key.
func imageKeys(t *testing.T, root string, env ...string) map[string]string {
	t.Helper()
	script := `set -euo pipefail
r=$1
(source "$r/testhost/testhost.sh"; for i in debian12 debian13 cloud; do echo "$i $(image_key "$i")"; done)
(source "$r/nestedhost/nestedhost.sh"; echo "l1 $(image_key)")
img=$(mktemp -d); trap 'rm -rf "$img"' EXIT
echo 6.1.0-test-amd64 >"$img/kernel-version"
(source "$r/tinyguest/tinyguest.sh"; echo "tiny $(tiny_key "$img")")
`
	cmd := exec.Command("bash", "-c", script, "keys", root)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reading the image keys: %v\n%s", err, out)
	}
	keys := map[string]string{}
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for line := range strings.Lines(string(out)) {
		name, key, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !hex16.MatchString(key) {
			t.Fatalf("unexpected line %q in:\n%s", line, out)
		}
		keys[name] = key
	}
	if want := []string{"cloud", "debian12", "debian13", "l1", "tiny"}; !slices.Equal(slices.Sorted(maps.Keys(keys)), want) {
		t.Fatalf("keys for %v, want %v", slices.Sorted(maps.Keys(keys)), want)
	}
	return keys
}

// copyScripts copies the host scripts and recipes (internal/acctest without
// its Go files) into a fresh directory.
func copyScripts(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, p), 0o755)
		}
		if strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, p), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func changed(a, b map[string]string) []string {
	var out []string
	for k := range a {
		if a[k] != b[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func needBash(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "sha256sum", "realpath"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
}

func TestImageKeys_editOneRecipeFile(t *testing.T) {
	t.Parallel()
	needBash(t)
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"testhost/recipes/debian12.sh", []string{"cloud", "debian12"}},
		{"testhost/recipes/debian13.sh", []string{"debian13"}},
		{"testhost/recipes/debian.sh", []string{"cloud", "debian12", "debian13"}},
		{"testhost/recipes/cloud-image.sh", []string{"cloud"}},
		{"nestedhost/recipes/l1.sh", []string{"l1"}},
		{"nestedhost/nvidia-standin/nvidia.c", []string{"l1"}},
		{"tinyguest/recipes/tiny.sh", []string{"tiny"}},
		{"tinyguest/recipes/init", []string{"tiny"}},
		// the scripts that build the images are not part of any recipe
		{"testhost/testhost.sh", nil},
		{"testhost/smoke.sh", nil},
		{"nestedhost/nestedhost.sh", nil},
		{"tinyguest/tinyguest.sh", nil},
		{"hostlib.sh", nil},
	} {
		t.Run(strings.ReplaceAll(tc.file, "/", "_"), func(t *testing.T) {
			t.Parallel()
			root := copyScripts(t)
			before := imageKeys(t, root)
			f, err := os.OpenFile(filepath.Join(root, tc.file), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("\n# an edit\n"); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if got := changed(before, imageKeys(t, root)); !slices.Equal(got, tc.want) {
				t.Errorf("editing %s changed the keys of %v, want %v", tc.file, got, tc.want)
			}
		})
	}
}

func TestImageKeys_mirror(t *testing.T) {
	t.Parallel()
	needBash(t)
	root := copyScripts(t)
	base := imageKeys(t, root)
	const m = "http://mirror.example/debian"
	if got, want := changed(base, imageKeys(t, root, "KOHAKU_TESTHOST_MIRROR="+m)), []string{"cloud", "debian12", "debian13", "l1"}; !slices.Equal(got, want) {
		// nestedhost.sh falls back to KOHAKU_TESTHOST_MIRROR
		t.Errorf("KOHAKU_TESTHOST_MIRROR changed the keys of %v, want %v", got, want)
	}
	if got, want := changed(base, imageKeys(t, root, "KOHAKU_NESTED_MIRROR="+m)), []string{"l1"}; !slices.Equal(got, want) {
		t.Errorf("KOHAKU_NESTED_MIRROR changed the keys of %v, want %v", got, want)
	}
}

// The keys do not depend on where the checkout is.
func TestImageKeys_sameInAnyCheckout(t *testing.T) {
	t.Parallel()
	needBash(t)
	a, b := imageKeys(t, copyScripts(t)), imageKeys(t, copyScripts(t))
	if got := changed(a, b); len(got) > 0 {
		t.Errorf("two copies of the same scripts give different keys for %v: %v and %v", got, a, b)
	}
	if here := imageKeys(t, "."); !maps.Equal(a, here) {
		t.Errorf("a copy gives %v, the checkout %v", a, here)
	}
}
