package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/ulikunitz/xz"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// imageServer serves a directory of test images over loopback HTTP, as a
// vendor's mirror would, and counts the requests for each path. /cut/<f>
// announces the whole file and closes the connection halfway.
type imageServer struct {
	*httptest.Server
	dir    string
	mu     sync.Mutex
	counts map[string]int
}

func newImageServer(t *testing.T, dir string) *imageServer {
	t.Helper()
	s := &imageServer{dir: dir, counts: map[string]int{}}
	files := http.FileServer(http.Dir(dir))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.counts[r.URL.Path]++
		s.mu.Unlock()
		if name, ok := strings.CutPrefix(r.URL.Path, "/cut/"); ok {
			data, err := os.ReadFile(filepath.Join(dir, filepath.Base(name)))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(data[:len(data)/2]) // cut off below either way
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				if err := conn.(*net.TCPConn).SetLinger(0); err != nil { // close with a reset
					t.Error(err)
				}
				conn.Close()
			}
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *imageServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[path]
}

// imageFixtures writes the images the test serves: a raw disk with an MBR
// signature, its qcow2 conversion (by qemu-img, as vendors make them), an
// xz copy of the raw, a qcow2 that names a backing file, and a SHA256SUMS
// in GNU style. It returns the sha256 of each file.
func imageFixtures(t *testing.T, dir string) map[string]string {
	t.Helper()
	raw := make([]byte, 24<<20)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 8<<20; i += 4096 {
		if i/4096%3 == 0 { // some incompressible blocks in the first 8 MiB, the rest zeros
			rng.Read(raw[i : i+4096])
		}
	}
	raw[510], raw[511] = 0x55, 0xAA
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("disk.raw", raw)
	var xzBuf bytes.Buffer
	zw, err := xz.NewWriter(&xzBuf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	write("disk.raw.xz", xzBuf.Bytes())
	for _, args := range [][]string{
		{"convert", "-f", "raw", "-O", "qcow2", "disk.raw", "disk.qcow2"},
		{"create", "-f", "qcow2", "-b", "disk.raw", "-F", "raw", "backed.qcow2", "24M"},
	} {
		cmd := exec.Command("qemu-img", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sums := map[string]string{}
	var list strings.Builder
	for _, name := range []string{"disk.raw", "disk.raw.xz", "disk.qcow2", "backed.qcow2"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		sums[name] = hex.EncodeToString(sum[:])
		fmt.Fprintf(&list, "%s  %s\n", sums[name], name)
	}
	write("SHA256SUMS", []byte(list.String()))
	return sums
}

// TestAccImage_fromVendorURL walks kohaku_image the way a user meets it:
// one URL with the vendor's SHA256SUMS, stored on two hosts of the hosts
// map from one download; a compressed source; a local file; an
// out-of-band delete recreated from the cache; import; the failures
// (checksum mismatch, a qcow2 naming a backing file, 404, a transfer cut
// mid-stream), none of which leaves a volume; and a delete refused while
// another volume is backed by the image.
func TestAccImage_fromVendorURL(t *testing.T) {
	env := acctest.NewVMEnv(t)
	tcpURI := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	prefix := vmTestPrefix(t, env, "img")
	dir := t.TempDir()
	sums := imageFixtures(t, dir)
	srv := newImageServer(t, dir)
	cache := t.TempDir()
	rawSize := int64(24 << 20)

	provider := fmt.Sprintf(`
provider "kohaku" {
  uri             = %q
  image_cache_dir = %q
  hosts           = { tcp = { uri = %q } }
}
`, env.URI, cache, tcpURI)
	fleet := fmt.Sprintf(`
resource "kohaku_image" "fleet" {
  count        = 2
  host         = [null, "tcp"][count.index]
  pool         = %[1]q
  name         = "%[2]s${["unix", "tcp"][count.index]}.qcow2"
  source       = "%[3]s/disk.qcow2"
  checksum_url = "%[3]s/SHA256SUMS"
}
`, env.Pool, prefix, srv.URL)
	others := fmt.Sprintf(`
resource "kohaku_image" "xz" {
  pool     = %[1]q
  name     = "%[2]sxz.raw"
  source   = "%[3]s/disk.raw.xz"
  checksum = "sha256:%[4]s"
}

resource "kohaku_image" "local" {
  pool   = %[1]q
  name   = "%[2]slocal.raw"
  source = %[5]q
}
`, env.Pool, prefix, srv.URL, sums["disk.raw.xz"], filepath.Join(dir, "disk.raw"))
	bad := func(source, extra string) string {
		return provider + fleet + others + fmt.Sprintf(`
resource "kohaku_image" "bad" {
  pool   = %q
  name   = "%sbad.qcow2"
  source = %q
  %s
}
`, env.Pool, prefix, source, extra)
	}
	unixVol := prefix + "unix.qcow2"
	overlay := prefix + "overlay.qcow2"
	// After each failing create: no volume of it is on the host. (A
	// step's Check does not run when ExpectError matched, so this runs in
	// the next step's PreConfig.)
	noBad := func() {
		left, err := acctest.Leftovers(env.URI, prefix+"bad", env.Pool)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("a failed create left %v", left)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A raw image is uploaded as its data: the 16 MiB of zeros at its end
	// stay a hole.
	volSparse := func(name string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			out, err := acctest.Virsh(env.URI, "vol-info", "--bytes", "--pool", env.Pool, name)
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			m := regexp.MustCompile(`Allocation:\s+(\d+) bytes`).FindStringSubmatch(out)
			if m == nil {
				return fmt.Errorf("no allocation in vol-info:\n%s", out)
			}
			if alloc, _ := strconv.ParseInt(m[1], 10, 64); alloc > 10<<20 {
				return fmt.Errorf("raw volume %s allocates %d bytes of a 24 MiB image holding 8 MiB of data: its zeros were written", name, alloc)
			}
			return nil
		}
	}
	volContent := func(name, wantSum string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			f := filepath.Join(t.TempDir(), "vol")
			if out, err := acctest.Virsh(env.URI, "vol-download", "--pool", env.Pool, name, f); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:]); got != wantSum {
				return fmt.Errorf("volume %s holds %d bytes with sha256 %s, want the image's %s", name, len(data), got, wantSum)
			}
			return nil
		}
	}

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: provider + fleet + others,
				// Ids are known at plan time and name the host, so a VM
				// can be checked against them before anything is made.
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue("kohaku_image.fleet[0]", tfjsonpath.New("id"), knownvalue.StringExact(env.Pool+"/"+prefix+"unix.qcow2")),
					plancheck.ExpectKnownValue("kohaku_image.fleet[1]", tfjsonpath.New("id"), knownvalue.StringExact("tcp/"+env.Pool+"/"+prefix+"tcp.qcow2")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("kohaku_image.fleet.0", "format", "qcow2"),
					resource.TestCheckResourceAttr("kohaku_image.fleet.0", "virtual_size_bytes", strconv.FormatInt(rawSize, 10)),
					resource.TestCheckResourceAttr("kohaku_image.fleet.0", "verified", "true"),
					resource.TestCheckResourceAttr("kohaku_image.fleet.0", "digest", "sha256:"+sums["disk.qcow2"]),
					resource.TestCheckResourceAttr("kohaku_image.fleet.0", "compression", ""),
					resource.TestCheckResourceAttr("kohaku_image.fleet.1", "verified", "true"),
					resource.TestCheckResourceAttr("kohaku_image.fleet.1", "host", "tcp"),
					resource.TestCheckResourceAttr("kohaku_image.xz", "compression", "xz"),
					resource.TestCheckResourceAttr("kohaku_image.xz", "format", "raw"),
					resource.TestCheckResourceAttr("kohaku_image.xz", "size_bytes", strconv.FormatInt(rawSize, 10)),
					resource.TestCheckResourceAttr("kohaku_image.xz", "verified", "true"),
					resource.TestCheckResourceAttr("kohaku_image.local", "verified", "false"),
					resource.TestCheckResourceAttr("kohaku_image.local", "digest", "sha256:"+sums["disk.raw"]),
					volContent(unixVol, sums["disk.qcow2"]),
					volContent(prefix+"tcp.qcow2", sums["disk.qcow2"]),
					volContent(prefix+"xz.raw", sums["disk.raw"]),
					volSparse(prefix+"xz.raw"),
					volSparse(prefix+"local.raw"),
					func(*terraform.State) error {
						// Two hosts, one download.
						if n := srv.count("/disk.qcow2"); n != 1 {
							return fmt.Errorf("the server saw %d requests for disk.qcow2, want 1 for both hosts", n)
						}
						out, err := acctest.Virsh(env.URI, "vol-dumpxml", "--pool", env.Pool, unixVol)
						if err != nil {
							return err
						}
						if !strings.Contains(out, "<format type='qcow2'/>") || !strings.Contains(out, fmt.Sprintf("<capacity unit='bytes'>%d</capacity>", rawSize)) {
							return fmt.Errorf("volume %s is not a qcow2 of %d bytes:\n%s", unixVol, rawSize, out)
						}
						return nil
					},
				),
			},
			{
				// Deleted out of band: the next apply makes it again, from
				// the cache.
				PreConfig: func() {
					if out, err := acctest.Virsh(env.URI, "vol-delete", "--pool", env.Pool, unixVol); err != nil {
						t.Fatalf("%v: %s", err, out)
					}
				},
				Config: provider + fleet + others,
				Check: resource.ComposeAggregateTestCheckFunc(
					volContent(unixVol, sums["disk.qcow2"]),
					func(*terraform.State) error {
						if n := srv.count("/disk.qcow2"); n != 1 {
							return fmt.Errorf("recreating the image downloaded it again (%d requests); the cache should have served it", n)
						}
						return nil
					},
				),
			},
			{
				// A VM on the default host given the tcp host's image is
				// refused at plan time.
				Config: provider + fleet + others + fmt.Sprintf(`
resource "kohaku_vm" "wrong_host" {
  name = "%swrong-host"
  type = "qemu"
  disk = { image = kohaku_image.fleet[1].id }
}
`, prefix),
				PlanOnly:    true,
				ExpectError: vmErrRE(`Image on another host`, fmt.Sprintf(`image "tcp/%s/%stcp.qcow2"`, env.Pool, prefix), `is on host "tcp", but this VM is on the provider's default host`),
			},
			{
				ResourceName:      "kohaku_image.fleet[1]",
				ImportState:       true,
				ImportStateId:     "tcp/" + env.Pool + "/" + prefix + "tcp.qcow2",
				ImportStateVerify: true,
				// What only the download knows; the id (with its host),
				// pool, name, format and sizes are read back.
				ImportStateVerifyIgnore: []string{"source", "checksum", "checksum_url", "digest", "verified", "compression", "size_bytes", "timeouts"},
			},
			{
				ResourceName:            "kohaku_image.xz",
				ImportState:             true,
				ImportStateId:           env.Pool + "/" + prefix + "xz.raw",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"source", "checksum", "checksum_url", "digest", "verified", "compression", "size_bytes", "timeouts"},
			},
			{
				Config:      bad(srv.URL+"/disk.qcow2", `checksum = "sha256:`+strings.Repeat("0", 64)+`"`),
				ExpectError: regexp.MustCompile(`(?s)mismatch.*` + strings.Repeat("0", 64) + `.*` + sums["disk.qcow2"]),
			},
			{
				// A local file is hashed as it uploads: the mismatch fails
				// the upload at its end, and the volume goes with it.
				PreConfig:   noBad,
				Config:      bad(filepath.Join(dir, "disk.qcow2"), `checksum = "sha256:`+strings.Repeat("0", 64)+`"`),
				ExpectError: regexp.MustCompile(`(?s)mismatch.*` + strings.Repeat("0", 64) + `.*` + sums["disk.qcow2"] + `.*left in the pool`),
			},
			{
				PreConfig:   noBad,
				Config:      bad(srv.URL+"/backed.qcow2", ""),
				ExpectError: regexp.MustCompile(`(?i)backing\s+file`),
			},
			{
				PreConfig:   noBad,
				Config:      bad(srv.URL+"/nope.qcow2", ""),
				ExpectError: regexp.MustCompile(`404`),
			},
			{
				PreConfig:   noBad,
				Config:      bad(srv.URL+"/cut/disk.qcow2", ""),
				ExpectError: regexp.MustCompile(`(?s)` + regexp.QuoteMeta(srv.URL+"/cut/disk.qcow2") + `.*(cut|EOF|short|bytes)`),
			},
			{
				// Another volume backed by the image: its delete is refused,
				// naming that volume.
				PreConfig: func() {
					noBad()
					path, err := acctest.Virsh(env.URI, "vol-path", "--pool", env.Pool, unixVol)
					if err != nil {
						t.Fatal(err)
					}
					if out, err := acctest.Virsh(env.URI, "vol-create-as", env.Pool, overlay, "30M", "--format", "qcow2", "--backing-vol", path, "--backing-vol-format", "qcow2"); err != nil {
						t.Fatalf("%v: %s", err, out)
					}
				},
				Config:      provider + others,
				ExpectError: regexp.MustCompile(`(?s)Image is in use.*` + regexp.QuoteMeta(env.Pool+"/"+overlay)),
			},
			{
				PreConfig: func() {
					if out, err := acctest.Virsh(env.URI, "vol-delete", "--pool", env.Pool, overlay); err != nil {
						t.Fatalf("%v: %s", err, out)
					}
				},
				Config: provider + others,
				Check: func(*terraform.State) error {
					left, err := acctest.Leftovers(env.URI, prefix, env.Pool)
					if err != nil {
						return err
					}
					if want := []string{"volume " + env.Pool + "/" + prefix + "local.raw", "volume " + env.Pool + "/" + prefix + "xz.raw"}; strings.Join(left, ",") != strings.Join(want, ",") {
						return fmt.Errorf("volumes %v, want %v", left, want)
					}
					return nil
				},
			},
		},
	})
}

// TestAccImage_bootsThroughFirmware follows the user's path end to end: a
// vendor-style cloud image (a partitioned disk with its own boot loader, as
// the test host serves it over HTTP with a SHA256SUMS) becomes a
// kohaku_image, once as the qcow2 and once from its zstd copy, and a VM
// (disk.image, or base_pool/base_volume) boots each through firmware, SeaBIOS and OVMF, with no kernel given:
// both become ready over the report channel, and each guest shows it was
// started by the image's own boot loader (its kernel command line) under
// the firmware asked for (/sys/firmware/efi only under UEFI).
func TestAccImage_bootsThroughFirmware(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	url := acctest.Env(t, "KOHAKU_TEST_CLOUD_IMAGE_URL")
	sums := acctest.Env(t, "KOHAKU_TEST_CLOUD_IMAGE_SUMS")
	prefix := vmTestPrefix(t, env, "fw")
	shares := map[string]string{"bios": t.TempDir(), "uefi": t.TempDir()}
	cfg := fmt.Sprintf(`
provider "kohaku" {
  uri             = %[1]q
  image_cache_dir = %[2]q
}

resource "kohaku_image" "qcow2" {
  pool         = %[3]q
  name         = "%[4]scloud.qcow2"
  source       = %[5]q
  checksum_url = %[6]q
}

resource "kohaku_image" "zst" {
  pool         = %[3]q
  name         = "%[4]scloud-from-zst.qcow2"
  source       = "%[5]s.zst"
  checksum_url = %[6]q
}
`, env.URI, t.TempDir(), env.Pool, prefix, url, sums)
	// Each seed writes a marker of its content into the share (the recipe
	// for a seed content change, replace_triggered_by, is
	// TestAccVM_seedChangeReplaces's, on the tiny guest).
	const generation = "      - echo 1 > /shared/generation\n"
	// Each VM asks for a 64-bit PCI window larger than QEMU's default of
	// 32 GiB; the guest reports the root bus's windows from /proc/iomem.
	mmio64 := map[string]int{"bios": 64, "uefi": 128}
	// The UEFI guest has the default CPU for type qemu (maximum), as a
	// user's VM does; the SeaBIOS guest has qemu64 (cpu_mode custom), under
	// which a Debian guest boots in about four fifths of the time under TCG.
	cpu := map[string]string{"bios": "  cpu_mode   = \"custom\"\n", "uefi": ""}
	for fw, image := range map[string]string{"bios": "qcow2", "uefi": "zst"} {
		cfg += fmt.Sprintf(`
resource "kohaku_seed" %[1]q {
  name     = "%[2]s%[1]s-seed.iso"
  pool     = %[3]q
  hostname = "fw-%[1]s"
  shared_folders = [{ tag = "kohaku_shared", path = "/shared" }]
  user_data = <<-EOT
    #cloud-config
    runcmd:
      - cat /proc/cmdline > /shared/cmdline
      - if [ -d /sys/firmware/efi ]; then echo uefi; else echo bios; fi > /shared/firmware
      - findmnt -n -o SOURCE / > /shared/root
      - grep 'PCI Bus 0000:00' /proc/iomem > /shared/iomem
`+generation+`      - sync
  EOT
}

resource "kohaku_vm" %[1]q {
  name       = "%[2]s%[1]s"
  type       = "qemu"
  vcpu       = 1
%[7]s  memory_mib = 1024
  firmware   = %[1]q
  seed_id    = kohaku_seed.%[1]s.id

  pci_mmio64_gib = %[6]d

  disk = {
    DISK_%[1]s
    pool = %[3]q
  }
  network_interface = [{ type = "user" }]
  shared_folder     = [{ source = %[5]q, tag = "kohaku_shared" }]
  shutdown_timeout  = "2s"
  timeouts {
    create = "15m"
  }
}
`, fw, prefix, env.Pool, image, shares[fw], mmio64[fw], cpu[fw])
	}
	noKernel := func(name string, want, notWant []string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			out, err := acctest.Virsh(env.URI, "dumpxml", "--inactive", name)
			if err != nil {
				return err
			}
			for _, f := range notWant {
				if strings.Contains(out, f) {
					return fmt.Errorf("the XML of %s has %q:\n%s", name, f, out)
				}
			}
			for _, f := range want {
				if !strings.Contains(out, f) {
					return fmt.Errorf("the XML of %s lacks %q:\n%s", name, f, out)
				}
			}
			return nil
		}
	}
	checks := []resource.TestCheckFunc{
		resource.TestCheckResourceAttr("kohaku_image.qcow2", "verified", "true"),
		resource.TestCheckResourceAttr("kohaku_image.qcow2", "format", "qcow2"),
		resource.TestCheckResourceAttr("kohaku_image.zst", "compression", "zstd"),
		resource.TestCheckResourceAttr("kohaku_image.zst", "verified", "true"),
		resource.TestCheckResourceAttrPair("kohaku_image.zst", "size_bytes", "kohaku_image.qcow2", "size_bytes"),
		noKernel(prefix+"bios", nil, []string{"<kernel>", "firmware='efi'", "<loader"}),
		noKernel(prefix+"uefi", []string{"firmware='efi'", "<cpu mode='maximum'"}, []string{"<kernel>"}),
		resource.TestCheckResourceAttr("kohaku_vm.uefi", "cpu_mode", "maximum"),
		resource.TestCheckResourceAttr("kohaku_vm.bios", "cpu_mode", "custom"),
	}
	for fw := range shares {
		checks = append(checks,
			resource.TestCheckResourceAttr("kohaku_vm."+fw, "guest.hostname", "fw-"+fw),
			checkShared(shares[fw], "firmware", regexp.MustCompile(`^`+fw+`\n$`)),
			checkShared(shares[fw], "cmdline", regexp.MustCompile(`root=LABEL=kohaku-root`)),
			checkShared(shares[fw], "root", regexp.MustCompile(`^/dev/vda2\n$`)),
		)
	}
	for fw := range shares {
		checks = append(checks,
			checkShared(shares[fw], "generation", regexp.MustCompile(`^1\n$`)),
			checkMMIO64Window(shares[fw], mmio64[fw]),
			checkQEMULog(prefix+fw, mmio64[fw], fw == "uefi"),
			resource.TestCheckResourceAttr("kohaku_vm."+fw, "pci_mmio64_gib", strconv.Itoa(mmio64[fw])),
		)
	}
	biosID := statecheck.CompareValue(compare.ValuesSame())
	uefiID := statecheck.CompareValue(compare.ValuesSame())
	// The SeaBIOS VM names its image by id (disk.image); the OVMF VM by
	// pool and volume first, then by id: the same image named another way
	// is an in-place change of the state only, not a new VM.
	const byID, byName = "image = kohaku_image.%s.id", "base_pool = kohaku_image.%[1]s.pool\n    base_volume = kohaku_image.%[1]s.name"
	gen := func(uefiDisk string) string {
		return strings.NewReplacer("DISK_bios", fmt.Sprintf(byID, "qcow2"), "DISK_uefi", fmt.Sprintf(uefiDisk, "zst")).Replace(cfg)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: gen(byName),
				Check:  resource.ComposeAggregateTestCheckFunc(checks...),
				ConfigStateChecks: []statecheck.StateCheck{
					biosID.AddStateValue("kohaku_vm.bios", tfjsonpath.New("uuid")),
					uefiID.AddStateValue("kohaku_vm.uefi", tfjsonpath.New("uuid")),
				},
			},
			{
				Config: gen(byID),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("kohaku_vm.bios", plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("kohaku_vm.uefi", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("kohaku_vm.uefi", tfjsonpath.New("disk").AtMapKey("image"), knownvalue.StringExact(env.Pool+"/"+prefix+"cloud-from-zst.qcow2")),
					plancheck.ExpectKnownValue("kohaku_vm.uefi", tfjsonpath.New("disk").AtMapKey("base_pool"), knownvalue.Null()),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					biosID.AddStateValue("kohaku_vm.bios", tfjsonpath.New("uuid")),
					uefiID.AddStateValue("kohaku_vm.uefi", tfjsonpath.New("uuid")),
				},
			},
		},
	})
}

// checkMMIO64Window checks that the guest's root PCI bus has a 64-bit
// window (above 4 GiB) of gib GiB, as /proc/iomem lists it in the share.
func checkMMIO64Window(share string, gib int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		b, err := os.ReadFile(filepath.Join(share, "iomem"))
		if err != nil {
			return fmt.Errorf("the guest wrote no /proc/iomem lines: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			rng, _, ok := strings.Cut(strings.TrimSpace(line), " ")
			lo, hi, ok2 := strings.Cut(rng, "-")
			if !ok || !ok2 {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil && start >= 1<<32 && end-start+1 == uint64(gib)<<30 {
				return nil
			}
		}
		return fmt.Errorf("no 64-bit window of %d GiB on PCI bus 0000:00 in the guest's /proc/iomem:\n%s", gib, b)
	}
}

// checkQEMULog checks the QEMU command line libvirt logged for the domain:
// the root bus's hole64 size and, under UEFI, OVMF's aperture in MiB.
func checkQEMULog(domain string, gib int, uefi bool) resource.TestCheckFunc {
	return func(*terraform.State) error {
		b, err := os.ReadFile(filepath.Join("/var/log/libvirt/qemu", domain+".log"))
		if err != nil {
			return err
		}
		want := []string{fmt.Sprintf("pci-hole64-size=%dK", gib<<20)}
		if uefi {
			want = append(want, fmt.Sprintf("-fw_cfg name=opt/ovmf/X-PciMmio64Mb,string=%d", gib<<10))
		}
		// libvirt writes the command line one option a line, ending
		// each with a backslash.
		cmdline := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\\\n", " ")), " ")
		for _, w := range want {
			if !strings.Contains(cmdline, w) {
				return fmt.Errorf("QEMU was not started with %q; its log:\n%s", w, b)
			}
		}
		return nil
	}
}
