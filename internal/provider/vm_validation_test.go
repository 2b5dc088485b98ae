package provider

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// vmErrRE matches the parts in order, each literally except that any run of
// spaces also matches Terraform's line wrapping.
func vmErrRE(parts ...string) *regexp.Regexp {
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = strings.Join(strings.Fields(regexp.QuoteMeta(p)), `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(quoted, `.*`))
}

// vmPlanProvider points at a socket that does not exist: these tests prove
// the checks run at plan time, before Kohaku talks to any host.
const vmPlanProvider = `provider "kohaku" {
  uri = "qemu:///system?socket=/nonexistent/libvirt-sock"
}
`

func TestVMRejectsBadInputAtPlan(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		body string
		want []string
	}{
		"memory below the minimum": {
			body: `memory_mib = 32`,
			want: []string{`Invalid memory_mib`, `memory_mib: 32 MiB is outside 64..4194304 MiB. For example: 2048.`},
		},
		"malformed hostdev": {
			body: `hostdevs = ["01:00.0"]`,
			want: []string{`Invalid hostdevs["01:00.0"]`, `the PCI domain is missing (did you mean 0000:01:00.0?). For example: "0000:01:00.0".`},
		},
		"mdev that is not a lower-case UUID": {
			body: `mdevs = ["6B6F6861-6B75-4D64-8000-000000000001"]`,
			want: []string{`Invalid Attribute Value Match`, `must be a UUID in lower case`},
		},
		"slot out of range": {
			body: `gpus = ["0000:01:20.0"]`,
			want: []string{`Invalid gpus["0000:01:20.0"]`, `slot "20": at most 0x1f`},
		},
		"bridge without a bridge": {
			body: `network_interface = [{ type = "user" }, { type = "bridge" }]`,
			want: []string{`Invalid network_interface[1].source`, `a bridge interface needs the bridge name. For example: "br0".`},
		},
		"unknown NIC type": {
			body: `network_interface = [{ type = "macvtap" }]`,
			want: []string{`Invalid network_interface[0].type`, `unknown interface type "macvtap"`},
		},
		"relative share": {
			body: `shared_folder = [{ source = "data", tag = "kohaku_shared" }]`,
			want: []string{`Invalid shared_folder[0].source`, `"data" is not an absolute path. For example: "/srv/kohaku/shared".`},
		},
		"data disk with neither size nor volume": {
			body: `data_disks = [{ name = "scratch" }]`,
			want: []string{`Data disk needs one of size_gib, volume and source`, `set exactly one of them`},
		},
		"data disk with size and volume": {
			body: `data_disks = [{ name = "scratch", size_gib = 10, volume = "x.qcow2" }]`,
			want: []string{`Data disk needs one of size_gib, volume and source`},
		},
		"keep on an existing volume": {
			body: `data_disks = [{ name = "data", volume = "x.qcow2", keep = true }]`,
			want: []string{`keep applies to new volumes`, `never deleted by Kohaku`},
		},
		"duplicate data disk": {
			body: `data_disks = [{ name = "a", size_gib = 1 }, { name = "a", size_gib = 2 }]`,
			want: []string{`Duplicate data disk name`},
		},
		"data disk serial with a space": {
			body: `data_disks = [{ name = "a", size_gib = 1, serial = "a b" }]`,
			want: []string{`Invalid data_disks[0].serial`, `characters other than letters`},
		},
		"9p tag too long": {
			body: `shared_folder = [{ source = "/srv", tag = "a_tag_that_is_far_too_long_for_9p" }]`,
			want: []string{`Invalid shared_folder[0].tag`, `is 33 bytes, more than the 31 a virtio-9p tag can hold`},
		},
		"read-only virtiofs": {
			body: `shared_folder = [{ source = "/srv", tag = "t", driver = "virtiofs", read_only = true }]`,
			want: []string{`Invalid shared_folder[0].read_only`, `libvirt 9.0 cannot make a virtiofs share read-only`},
		},
		"topology that is not vcpu": {
			body: `vcpu = 8
  cpu_topology = { sockets = 2, cores = 2, threads = 1 }`,
			want: []string{`Invalid cpu_topology`, `sockets x cores x threads is 2 x 2 x 1 = 4, not vcpu (8). For example: { sockets = 1, cores = 8, threads = 1 } for vcpu = 8.`},
		},
		"memory that is not whole huge pages": {
			body: `memory_mib = 1000
  hugepages = { page_size_mib = 1024 }`,
			want: []string{`Invalid memory_mib`, `1000 MiB is not a whole number of 1024 MiB huge pages. For example: 1024.`},
		},
		"huge page size the kernel has not": {
			body: `hugepages = { page_size_mib = 4 }`,
			want: []string{`Invalid Attribute Value`, `page_size_mib value must be one of`},
		},
		"unknown placement": {
			body: `numa_placement = "strict"`,
			want: []string{`Invalid Attribute Value Match`, `numa_placement value must be one of`},
		},
		"host-passthrough under TCG": {
			body: `cpu_mode = "host-passthrough"`,
			want: []string{`Invalid cpu_mode`, `host-passthrough needs KVM; QEMU refuses it under TCG`},
		},
		"bad seed id": {
			body: `seed_id = "web-1-seed.iso"`,
			want: []string{`Invalid seed_id`, `"web-1-seed.iso" is not a kohaku_seed id of the form <pool>/<volume>`},
		},
		"GPU of another host": {
			body: `
  host = "gpu1"
  gpus = ["gpu2/0000:01:00.0"]`,
			want: []string{`GPU on another host`, `"gpu2/0000:01:00.0" is bound on host "gpu2", but this VM is on host "gpu1"`},
		},
		"image of the default host on a hosts map host": {
			body: `
  host = "gpu1"
  disk = { image = "default/debian-12.qcow2" }`,
			want: []string{`Image on another host`, `image "default/debian-12.qcow2" (pool "default", volume "debian-12.qcow2") is on the provider's default host, but this VM is on host "gpu1"`, `Use the id of a kohaku_image with host = "gpu1"`},
		},
		"image of a hosts map host on the default host": {
			body: `disk = { image = "gpu2/images/debian-12.qcow2" }`,
			want: []string{`Image on another host`, `is on host "gpu2", but this VM is on the provider's default host`, `Use the id of a kohaku_image without host`},
		},
		"image that is not an id": {
			body: `disk = { image = "debian-12.qcow2" }`,
			want: []string{`Invalid disk.image`, `"debian-12.qcow2" is not a kohaku_image id`, `image = kohaku_image.debian12.id`},
		},
		"image and base_volume": {
			body: `disk = { image = "default/debian-12.qcow2", base_volume = "debian-12.qcow2" }`,
			want: []string{`Conflicting disk sources`, `disk sets image and base_volume: set only one of image or base_volume`},
		},
		"base_pool with image": {
			body: `disk = { image = "default/debian-12.qcow2", base_pool = "images" }`,
			want: []string{`Setting without base_volume`, `with image, the pool is part of the image's id`},
		},
		"64-bit MMIO window too large": {
			body: `pci_mmio64_gib = 40000`,
			want: []string{`Invalid Attribute Value`, `pci_mmio64_gib`, `value must be between 1 and 32768, got: 40000`},
		},
		"unknown on_config_mismatch": {
			body: `on_config_mismatch = "error"`,
			want: []string{`Invalid Attribute Value Match`, `on_config_mismatch`, `value must be one of: ["warn" "fail"], got: "error"`},
		},
		"on_config_mismatch fail with no wait": {
			body: `
  wait_for           = "none"
  on_config_mismatch = "fail"`,
			want: []string{`Invalid on_config_mismatch`, `on_config_mismatch = "fail" fails the create when the first-boot reporter finds`, `wait_for = "none" gets no such report`, `wait_for = "channel"`},
		},
		"negative shutdown timeout": {
			body: `shutdown_timeout = "-1s"`,
			want: []string{`Invalid duration`, `"-1s" is not a duration of zero or more`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config: vmPlanProvider + `
resource "kohaku_vm" "bad" {
  name   = "kohaku-acc-plan"
  type   = "qemu"
  kernel = "/boot/vmlinuz"
  initrd = "/boot/initrd.img"
  ` + tc.body + `
}
`,
					PlanOnly:    true,
					ExpectError: vmErrRE(tc.want...),
				}},
			})
		})
	}
}

func TestVMRejectsBadBootAtPlan(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		body string
		want []string
	}{
		"kernel alone": {
			body: `kernel = "/boot/vmlinuz"`,
			want: []string{`Invalid initrd`, `a kernel without a disk needs an initrd to hold its userspace`},
		},
		"both base and volume": {
			body: `disk = { base_volume = "a.qcow2", volume = "b.qcow2" }`,
			want: []string{`Conflicting disk sources`, `disk sets base_volume and volume: set only one of image or base_volume`, `or volume`},
		},
		"neither base nor volume": {
			body: `disk = { pool = "default" }`,
			want: []string{`Missing disk source`, `set image or base_volume`},
		},
		"base pool without base": {
			body: `disk = { volume = "b.qcow2", base_pool = "images" }`,
			want: []string{`Setting without an overlay`, `disk.base_pool only applies to an overlay on a base image`},
		},
		"bad name": {
			body: `disk = { volume = "b.qcow2" }
  name = "web 1"`,
			want: []string{`Invalid name`, `"web 1" has characters other than letters`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := tc.body
			if !regexp.MustCompile(`(?m)^\s*name\s*=`).MatchString(body) {
				body = `name = "kohaku-acc-plan"` + "\n  " + body
			}
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config: vmPlanProvider + `
resource "kohaku_vm" "bad" {
  type = "qemu"
  ` + body + `
}
`,
					PlanOnly:    true,
					ExpectError: vmErrRE(tc.want...),
				}},
			})
		})
	}
}

// A valid configuration plans without a host, values unknown until apply
// included (they are checked again at apply).
func TestVMPlansWithoutHost(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: vmPlanProvider + `
resource "terraform_data" "later" {
  input = "0000:01:00.0"
}

resource "kohaku_vm" "ok" {
  name       = "kohaku-acc-plan"
  type       = "qemu"
  memory_mib = 2048
  vcpu       = 2
  disk = {
    base_pool   = "kohaku-images"
    base_volume = "rootfs.qcow2"
    size_gib    = 20
  }
  seed_id = "default/kohaku-acc-plan-seed.iso"
  network_interface = [
    { type = "user" },
    { type = "bridge", source = "br0", mac = "52:54:00:12:34:56" },
  ]
  shared_folder = [{ source = "/srv/shared", tag = "kohaku_shared", access_mode = "mapped" }]
  hostdevs      = [terraform_data.later.output]
  gpus          = ["0000:02:00.0"]

  on_config_mismatch = "fail"
}
`,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
}
