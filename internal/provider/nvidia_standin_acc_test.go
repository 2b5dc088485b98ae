package provider

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The NVIDIA install path against stand-ins that behave like the real
// thing, for a real guest on user-mode networking (it reaches the host's
// loopback as 10.0.2.2). One HTTP server on loopback plays two parts:
//
//   - NVIDIA's download site: /{version}/NVIDIA-Linux-x86_64-{version}.run
//     for the one version it has, a shell script that, like NVIDIA's .run,
//     refuses to run without the running kernel's headers, then installs
//     nvidia-smi in /usr/bin. It writes its own name, version and arguments
//     into the guest's 9p share first, so the test reads how it was run.
//   - a Debian mirror (flat repository under /apt/, trusted=yes) with
//     stand-in packages for what the seed installs before the driver:
//     build-essential, dkms, linux-headers-<the guest kernel's release>
//     (shipping /usr/src/linux-headers-<release>/Makefile) and the
//     linux-headers-amd64 meta package. The guest's apt is pointed at it
//     (cloud-init's apt module, from the test's own user-data), so the boot
//     neither reaches the internet nor spends minutes unpacking compilers
//     under TCG, and cloud-init finishes without errors as it would with a
//     real mirror.

// nvidiaStandInVersion is the one driver version the stand-in site serves.
const nvidiaStandInVersion = "550.54.15"

// nvidiaStandInGPU is what the installed stand-in nvidia-smi reports.
const nvidiaStandInGPU = "Kohaku Stand-in H100 NVL"

// nvidiaStandInMiB is its memory.total.
const nvidiaStandInMiB = 95830

// nvidiaStandInRecord is the file in the share the installer writes.
const nvidiaStandInRecord = "nvidia-installer"

type nvidiaStandIn struct {
	Port int
	srv  *http.Server
	mu   sync.Mutex
	reqs []string // "GET /path" of every request, in order
	site map[string][]byte
	// release is the guest kernel's release (uname -r).
	release string
}

// startNVIDIAStandIn serves the stand-in site and mirror on 127.0.0.1. The
// kernel release of the guest (for the headers package) is read from the
// guest kernel image the test boots.
func startNVIDIAStandIn(t *testing.T, kernel string) *nvidiaStandIn {
	t.Helper()
	rel, err := bzImageRelease(kernel)
	if err != nil {
		t.Fatalf("guest kernel release: %v", err)
	}
	s := &nvidiaStandIn{site: map[string][]byte{}, release: rel}
	s.site[fmt.Sprintf("/%[1]s/NVIDIA-Linux-x86_64-%[1]s.run", nvidiaStandInVersion)] = []byte(nvidiaStandInInstaller(nvidiaStandInVersion))

	type pkg struct{ name, depends string }
	var packages bytes.Buffer
	for _, p := range []pkg{
		{"build-essential", ""},
		{"dkms", ""},
		{"linux-headers-" + rel, ""},
		{"linux-headers-amd64", "linux-headers-" + rel},
	} {
		files := map[string]string{"usr/lib/kohaku-standin/" + p.name: "stand-in\n"}
		if p.name == "linux-headers-"+rel {
			files["usr/src/linux-headers-"+rel+"/Makefile"] = "# stand-in kernel headers\n"
		}
		deb, err := standInDeb(p.name, "99.kohaku", p.depends, files)
		if err != nil {
			t.Fatalf("building stand-in %s: %v", p.name, err)
		}
		file := fmt.Sprintf("pool/%s_99.kohaku_amd64.deb", p.name)
		s.site["/apt/"+file] = deb
		sum := sha256.Sum256(deb)
		fmt.Fprintf(&packages, "Package: %s\nVersion: 99.kohaku\nArchitecture: amd64\nMaintainer: Kohaku tests <tests@kohaku.invalid>\nInstalled-Size: 1\n", p.name)
		if p.depends != "" {
			fmt.Fprintf(&packages, "Depends: %s\n", p.depends)
		}
		fmt.Fprintf(&packages, "Filename: ./%s\nSize: %d\nSHA256: %s\nDescription: Kohaku test stand-in for %s\n\n", file, len(deb), hex.EncodeToString(sum[:]), p.name)
	}
	s.site["/apt/Packages"] = packages.Bytes()
	sum := sha256.Sum256(packages.Bytes())
	s.site["/apt/Release"] = []byte(fmt.Sprintf("Origin: Kohaku stand-in\nLabel: Kohaku stand-in\nDate: Thu, 01 Jan 2026 00:00:00 UTC\nSHA256:\n %s %d Packages\n", hex.EncodeToString(sum[:]), packages.Len()))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Port = ln.Addr().(*net.TCPAddr).Port
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean(r.URL.Path)
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Method+" "+p)
		s.mu.Unlock()
		b, ok := s.site[p]
		if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(b)
		}
	})}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// requests is every request so far, in order.
func (s *nvidiaStandIn) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// check: the guest fetched exactly the installer of the version its seed
// asked for, once, and from the mirror the stand-in build tools and headers.
func (s *nvidiaStandIn) check() error {
	var site []string
	apt := map[string]bool{}
	for _, r := range s.requests() {
		if strings.HasPrefix(r, "GET /apt/") {
			apt[strings.TrimPrefix(r, "GET ")] = true
			continue
		}
		site = append(site, r)
	}
	want := fmt.Sprintf("GET /%[1]s/NVIDIA-Linux-x86_64-%[1]s.run", nvidiaStandInVersion)
	if len(site) != 1 || site[0] != want {
		return fmt.Errorf("the stand-in NVIDIA site saw %q, want exactly [%q]", site, want)
	}
	// The build tools, and the headers of the running kernel by their
	// exact name: the linux-headers-amd64 fallback is not needed.
	var got []string
	for r := range apt {
		if strings.HasSuffix(r, ".deb") {
			got = append(got, r)
		}
	}
	sort.Strings(got)
	wantDebs := []string{
		"/apt/pool/build-essential_99.kohaku_amd64.deb",
		"/apt/pool/dkms_99.kohaku_amd64.deb",
		"/apt/pool/linux-headers-" + s.release + "_99.kohaku_amd64.deb",
	}
	if strings.Join(got, " ") != strings.Join(wantDebs, " ") {
		return fmt.Errorf("the guest's apt fetched %q from the stand-in mirror, want %q (requests: %q)", got, wantDebs, s.requests())
	}
	return nil
}

// nvidiaStandInAptUserData is cloud-config that points the guest's apt at
// the stand-in mirror only.
func nvidiaStandInAptUserData(port int) string {
	return fmt.Sprintf(`apt:
      preserve_sources_list: false
      sources_list: |
        deb [trusted=yes] http://10.0.2.2:%d/apt ./
`, port)
}

// nvidiaStandInInstaller is the stand-in NVIDIA-Linux-x86_64-<version>.run.
func nvidiaStandInInstaller(version string) string {
	return `#!/bin/sh
# Stand-in for NVIDIA-Linux-x86_64-` + version + `.run (Kohaku acceptance tests).
VERSION=` + version + `
rec=/shared/` + nvidiaStandInRecord + `
{
	printf 'name=%s\n' "$(basename "$0")"
	printf 'version=%s\n' "$VERSION"
	printf 'args=%s\n' "$*"
	printf 'kernel=%s\n' "$(uname -r)"
} > "$rec"
# Like NVIDIA's installer: no kernel headers for the running kernel, no
# kernel module, no driver.
if [ ! -f "/usr/src/linux-headers-$(uname -r)/Makefile" ]; then
	echo "result=ERROR: no kernel headers for $(uname -r)" >> "$rec"
	exit 1
fi
cat > /usr/bin/nvidia-smi <<'SMI'
#!/bin/sh
case "$*" in
*utilization.gpu*) echo "0, ` + nvidiaStandInGPU + `, ` + version + `, 12, 2048, ` + fmt.Sprint(nvidiaStandInMiB) + `, 38, 71.25" ;;
*) echo "` + nvidiaStandInGPU + `, ` + version + `, ` + fmt.Sprint(nvidiaStandInMiB) + `" ;;
esac
SMI
chmod 0755 /usr/bin/nvidia-smi
echo "result=installed /usr/bin/nvidia-smi" >> "$rec"
sync
`
}

// bzImageRelease reads the kernel release from a bzImage's setup header
// (kernel_version at 0x20e points, less 0x200, at "6.1.0-50-amd64 (...").
func bzImageRelease(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if len(b) < 0x210 || string(b[0x202:0x206]) != "HdrS" {
		return "", fmt.Errorf("%s is not a bzImage", file)
	}
	off := int(binary.LittleEndian.Uint16(b[0x20e:])) + 0x200
	if off >= len(b) {
		return "", fmt.Errorf("%s: kernel_version offset out of range", file)
	}
	s := b[off:]
	if i := bytes.IndexAny(s, " \x00"); i > 0 {
		return string(s[:i]), nil
	}
	return "", fmt.Errorf("%s: no kernel version string", file)
}

// standInDeb is a Debian binary package with the given files, built the way
// dpkg-deb lays one out: an ar archive of debian-binary, control.tar.gz and
// data.tar.gz.
func standInDeb(name, version, depends string, files map[string]string) ([]byte, error) {
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: Kohaku tests <tests@kohaku.invalid>\nInstalled-Size: 1\n", name, version)
	if depends != "" {
		control += "Depends: " + depends + "\n"
	}
	control += "Description: Kohaku test stand-in for " + name + "\n"
	ctl, err := tarGz(map[string]string{"control": control})
	if err != nil {
		return nil, err
	}
	data, err := tarGz(files)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("!<arch>\n")
	for _, m := range []struct {
		name string
		body []byte
	}{{"debian-binary", []byte("2.0\n")}, {"control.tar.gz", ctl}, {"data.tar.gz", data}} {
		fmt.Fprintf(&out, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", m.name, 1767225600, 0, 0, "100644", len(m.body))
		out.Write(m.body)
		if len(m.body)%2 == 1 {
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), nil
}

// tarGz is a gzipped tar of files (relative paths) under "./", with every
// parent directory as its own entry first.
func tarGz(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	mt := time.Unix(1767225600, 0)
	dirs := map[string]bool{}
	var names []string
	for f := range files {
		names = append(names, f)
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	sort.Strings(names)
	if err := tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt, Uname: "root", Gname: "root"}); err != nil {
		return nil, err
	}
	for _, d := range ds {
		if err := tw.WriteHeader(&tar.Header{Name: "./" + d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt, Uname: "root", Gname: "root"}); err != nil {
			return nil, err
		}
	}
	for _, f := range names {
		body := files[f]
		if err := tw.WriteHeader(&tar.Header{Name: "./" + f, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: mt, Uname: "root", Gname: "root"}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
