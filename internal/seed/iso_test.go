package seed

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kdomanski/iso9660"
)

// readISO reads every regular file of an image with the library's reader,
// keyed by the path cloud-init sees (the kernel drops the ";1" suffix just
// as File.Name does).
func readISO(t testing.TB, img []byte) (label string, files map[string][]byte, modTimes []time.Time) {
	t.Helper()
	im, err := iso9660.OpenImage(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("OpenImage: %v", err)
	}
	label, err = im.Label()
	if err != nil {
		t.Fatalf("Label: %v", err)
	}
	root, err := im.RootDir()
	if err != nil {
		t.Fatalf("RootDir: %v", err)
	}
	files = map[string][]byte{}
	var walk func(dir *iso9660.File, prefix string)
	walk = func(dir *iso9660.File, prefix string) {
		children, err := dir.GetChildren()
		if err != nil {
			t.Fatalf("GetChildren(%q): %v", prefix, err)
		}
		for _, c := range children {
			p := path.Join(prefix, c.Name())
			modTimes = append(modTimes, c.ModTime())
			if c.IsDir() {
				walk(c, p)
				continue
			}
			b, err := io.ReadAll(c.Reader())
			if err != nil {
				t.Fatalf("reading %s: %v", p, err)
			}
			files[p] = b
		}
	}
	walk(root, "")
	return label, files, modTimes
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestISOReadBackWithLibrary(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenSpecs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Render(tc.spec(t))
			if err != nil {
				t.Fatal(err)
			}
			label, got, times := readISO(t, r.ISO)
			if label != r.Label {
				t.Errorf("label %q, want %q", label, r.Label)
			}
			if g, w := sortedKeys(got), sortedKeys(r.Files); strings.Join(g, ",") != strings.Join(w, ",") {
				t.Fatalf("files in ISO %v, want %v", g, w)
			}
			for name, want := range r.Files {
				if !bytes.Equal(got[name], want) {
					t.Errorf("%s: ISO holds %d bytes that differ from the rendered %d", name, len(got[name]), len(want))
				}
			}
			for _, mt := range times {
				if !mt.Equal(ISOTimestamp) {
					t.Errorf("directory record time %v, want %v", mt, ISOTimestamp)
				}
			}
		})
	}
}

func TestISOReadBackWithXorriso(t *testing.T) {
	t.Parallel()
	xorriso := requireTool(t, "xorriso")
	for _, tc := range goldenSpecs() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Render(tc.spec(t))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			img := filepath.Join(dir, "seed.iso")
			if err := os.WriteFile(img, r.ISO, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(xorriso, "-indev", img, "-pvd_info").CombinedOutput()
			if err != nil {
				t.Fatalf("xorriso -pvd_info: %v\n%s", err, out)
			}
			if m := regexp.MustCompile(`(?m)^Volume Id\s*:\s*(\S+)\s*$`).FindSubmatch(out); m == nil || string(m[1]) != r.Label {
				t.Errorf("xorriso volume id: %q, want %q\n%s", m, r.Label, out)
			}
			if !bytes.Contains(out, []byte("Creation Time: 2000010100000000")) {
				t.Errorf("xorriso creation time is not the fixed ISOTimestamp:\n%s", out)
			}
			ext := filepath.Join(dir, "x")
			out, err = exec.Command(xorriso, "-osirrox", "on", "-indev", img, "-extract", "/", ext).CombinedOutput()
			if err != nil {
				t.Fatalf("xorriso -extract: %v\n%s", err, out)
			}
			got := map[string][]byte{}
			err = filepath.WalkDir(ext, func(p string, d os.DirEntry, err error) error {
				if err != nil {
					return err
				}
				_ = os.Chmod(p, 0o755) // xorriso restores read-only modes; let TempDir clean up
				if d.IsDir() {
					return nil
				}
				b, err := os.ReadFile(p)
				rel, _ := filepath.Rel(ext, p)
				got[filepath.ToSlash(rel)] = b
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := sortedKeys(got), sortedKeys(r.Files); strings.Join(g, ",") != strings.Join(w, ",") {
				t.Fatalf("xorriso extracted %v, want %v", g, w)
			}
			for name, want := range r.Files {
				if !bytes.Equal(got[name], want) {
					t.Errorf("%s: xorriso extracted bytes differ from the rendered ones", name)
				}
			}
		})
	}
}

// TestISOBlkid checks the image the way cloud-init finds a seed: its
// find_devs_with runs blkid for TYPE=iso9660 and LABEL=cidata/config-2.
func TestISOBlkid(t *testing.T) {
	t.Parallel()
	blkid := requireTool(t, "blkid")
	for _, f := range []Format{FormatNoCloud, FormatConfigDrive} {
		s := typicalSpec()
		s.Format = f
		r, err := Render(s)
		if err != nil {
			t.Fatal(err)
		}
		img := filepath.Join(t.TempDir(), "seed.iso")
		if err := os.WriteFile(img, r.ISO, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(blkid, "-p", "-o", "export", img).CombinedOutput()
		if err != nil {
			t.Fatalf("blkid: %v\n%s", err, out)
		}
		for _, want := range []string{"TYPE=iso9660", "LABEL=" + r.Label} {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).Match(out) {
				t.Errorf("%s: blkid output lacks %s:\n%s", f, want, out)
			}
		}
	}
}

func TestISOReproducible(t *testing.T) {
	t.Parallel()
	a, err := Render(typicalSpec())
	if err != nil {
		t.Fatal(err)
	}
	// The writer stamps the time with hundredths of a second: builds this
	// far apart would differ if any timestamp were left as it stamps it.
	time.Sleep(30 * time.Millisecond)
	b, err := Render(typicalSpec())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.ISO, b.ISO) || a.ISOSHA256 != b.ISOSHA256 {
		t.Fatalf("two builds of the same spec differ: %s vs %s", a.ISOSHA256, b.ISOSHA256)
	}
	pvd := a.ISO[16*2048 : 17*2048]
	for name, off := range map[string]int{"creation": 813, "modification": 830, "effective": 864} {
		if got := string(pvd[off : off+16]); got != "2000010100000000" {
			t.Errorf("PVD %s time %q, want 2000010100000000", name, got)
		}
	}
	if got := strings.TrimRight(string(pvd[8:40]), " "); got != "linux" {
		t.Errorf("PVD system identifier %q, want linux on every OS", got)
	}
}

func TestOneByteChangeChangesISOAndInstanceID(t *testing.T) {
	t.Parallel()
	base := typicalSpec()
	base.UserData = []byte("#cloud-config\nruncmd: [echo a]\n")
	changed := typicalSpec()
	changed.UserData = []byte("#cloud-config\nruncmd: [echo b]\n")
	ra, err := Render(base)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Render(changed)
	if err != nil {
		t.Fatal(err)
	}
	if ra.ISOSHA256 == rb.ISOSHA256 {
		t.Errorf("a one-byte user data change kept sha256 %s", ra.ISOSHA256)
	}
	if ra.InstanceID == rb.InstanceID {
		t.Errorf("a one-byte user data change kept instance id %s", ra.InstanceID)
	}
	if !strings.HasPrefix(ra.InstanceID, "typical-") || len(ra.InstanceID) != len("typical-")+12 {
		t.Errorf("instance id %q is not <name>-<12 hex>", ra.InstanceID)
	}
	// An explicit instance id wins and is kept across content changes.
	base.InstanceID, changed.InstanceID = "fixed-id", "fixed-id"
	ra, _ = Render(base)
	rb, _ = Render(changed)
	if ra.InstanceID != "fixed-id" || rb.InstanceID != "fixed-id" {
		t.Errorf("instance id override not used: %q, %q", ra.InstanceID, rb.InstanceID)
	}
	if ra.ISOSHA256 == rb.ISOSHA256 {
		t.Error("content change with a fixed instance id kept the ISO sha256")
	}
}

func TestBuildISORejectsMangledNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Meta-Data", "a b", "x.tar.gz", "dir.d/file", "", strings.Repeat("a", 40)} {
		if _, err := BuildISO("cidata", map[string][]byte{name: []byte("x")}); err == nil {
			t.Errorf("BuildISO accepted %q, which ISO 9660 mangling would rename", name)
		}
	}
	if _, err := BuildISO("", map[string][]byte{"a": nil}); err == nil {
		t.Error("BuildISO accepted an empty label")
	}
}
