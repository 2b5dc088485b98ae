package provider

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// hostChecks compares the data source with what virsh reports for the same
// host: versions, NUMA nodes and GPUs.
func hostChecks(t *testing.T, virshURI, addr string) []statecheck.StateCheck {
	daemon, hypervisor := virshVersion(t, virshURI)
	return []statecheck.StateCheck{
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("libvirt_version"), knownvalue.StringExact(daemon)),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("hypervisor_version"), knownvalue.StringExact(hypervisor)),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("hypervisor_type"), knownvalue.StringExact("QEMU")),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("cpus"), knownvalue.Int64Func(func(v int64) error {
			if v < 1 {
				return fmt.Errorf("cpus = %d", v)
			}
			return nil
		})),
		statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f-]{36}$`))),
		numaCheck(t, virshURI, addr),
		gpusCheck(t, virshURI, addr),
	}
}

// poolCheck looks for the test host's pool, and for qemu (TCG) among the
// domain types, which every host with qemu-system offers.
func poolCheck(addr string) resource.TestCheckFunc {
	return resource.ComposeAggregateTestCheckFunc(
		resource.TestCheckTypeSetElemNestedAttrs(addr, "pools.*", map[string]string{
			"name":   "kohaku-acc",
			"type":   "dir",
			"active": "true",
		}),
		resource.TestCheckTypeSetElemAttr(addr, "domain_types.*", "qemu"),
	)
}

func TestAccHostDataSource_unixSocket(t *testing.T) {
	uri := acctest.URI(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ConfigStateChecks: hostChecks(t, uri, "data.kohaku_host.this"),
			Check: resource.ComposeAggregateTestCheckFunc(
				poolCheck("data.kohaku_host.this"),
				resource.TestCheckResourceAttr("data.kohaku_host.this", "uri", uri),
			),
		}},
	})
}

func TestAccHostDataSource_tcpLoopback(t *testing.T) {
	uri := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ConfigStateChecks: hostChecks(t, uri, "data.kohaku_host.this"),
			Check:             poolCheck("data.kohaku_host.this"),
		}},
	})
}

func sshConfig(uri, keyFile, knownHosts string) string {
	return fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  ssh = {
    key_file         = %q
    known_hosts_file = %q
    use_agent        = false
  }
}
data "kohaku_host" "this" {}
`, uri, keyFile, knownHosts)
}

func TestAccHostDataSource_ssh(t *testing.T) {
	local := acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:            sshConfig(uri, sshd.ClientKey, sshd.WriteKnownHosts(t)),
			ConfigStateChecks: hostChecks(t, local, "data.kohaku_host.this"),
			Check: resource.ComposeAggregateTestCheckFunc(
				poolCheck("data.kohaku_host.this"),
				resource.TestCheckResourceAttr("data.kohaku_host.this", "uri", uri),
			),
		}},
	})
}

func TestAccHostDataSource_sshUnknownHostKey(t *testing.T) {
	acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config: sshConfig(uri, sshd.ClientKey, sshd.Dir+"/empty_known_hosts"),
			// The diagnostic names the URI, says the key is unknown, shows
			// the fingerprint and the line to add.
			ExpectError: regexp.MustCompile(`(?s)Cannot use libvirt host qemu\+ssh://root@127\.0\.0\.1:\d+/system.*SSH host key of\s+127\.0\.0\.1:\d+ \(ssh-ed25519\s+SHA256:.*is not in.*empty_known_hosts.*\[127\.0\.0\.1\]:\d+ ssh-ed25519`),
		}},
	})
}

func TestAccHostDataSource_sshRefusedAuth(t *testing.T) {
	acctest.URI(t)
	sshd := acctest.StartSSHD(t)
	uri := fmt.Sprintf("qemu+ssh://root@127.0.0.1:%d/system", sshd.Port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      sshConfig(uri, sshd.WriteOtherKey(t), sshd.WriteKnownHosts(t)),
			ExpectError: regexp.MustCompile(`(?s)transport ssh.*SSH server refused user\s+"root".*stranger_ed25519.*ssh.key_file`),
		}},
	})
}

func TestAccHostDataSource_unreachable(t *testing.T) {
	acctest.URI(t)
	port := acctest.ClosedPort(t)
	uri := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", port)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      providerBlock(uri) + `data "kohaku_host" "this" {}`,
			ExpectError: regexp.MustCompile(fmt.Sprintf(`(?s)qemu\+tcp://127\.0\.0\.1:%d/system.*transport tcp.*connection refused.*listen_tcp`, port)),
		}},
	})
}

// A down host in the hosts map fails only what is placed on it; the same
// daemon reached over two transports reports the same host.
func TestAccHostDataSource_hostsMap(t *testing.T) {
	local := acctest.URI(t)
	tcp := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	down := fmt.Sprintf("qemu+tcp://127.0.0.1:%d/system", acctest.ClosedPort(t))
	cfg := fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  hosts = {
    loopback = { uri = %q }
    down     = { uri = %q }
  }
}
data "kohaku_host" "default" {}
data "kohaku_host" "loopback" {
  host = "loopback"
}
`, local, tcp, down)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.CompareValuePairs("data.kohaku_host.default", tfjsonpath.New("id"),
						"data.kohaku_host.loopback", tfjsonpath.New("id"), compareSame{}),
					statecheck.ExpectKnownValue("data.kohaku_host.loopback", tfjsonpath.New("uri"), knownvalue.StringExact(tcp)),
				},
			},
			{
				Config:      cfg + "data \"kohaku_host\" \"down\" {\n  host = \"down\"\n}\n",
				ExpectError: regexp.MustCompile(`(?s)Cannot use libvirt host\s+qemu\+tcp://127\.0\.0\.1:\d+/system.*connection refused`),
			},
		},
	})
}

// virshCell is one NUMA cell of `virsh capabilities`, read with regular
// expressions: independent of the provider's XML parsing.
type virshCell struct {
	id, memoryKiB int64
	cpus          []int64
	pages         map[int64]int64 // size KiB -> total
}

var (
	virshCellRE  = regexp.MustCompile(`(?s)<cell id='(\d+)'>(.*?)</cell>`)
	virshMemRE   = regexp.MustCompile(`<memory unit='KiB'>(\d+)</memory>`)
	virshPagesRE = regexp.MustCompile(`<pages unit='KiB' size='(\d+)'>(\d+)</pages>`)
	virshCPURE   = regexp.MustCompile(`<cpu id='(\d+)'`)
)

func atoi64(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

func virshCells(t *testing.T, uri string) []virshCell {
	t.Helper()
	caps, err := acctest.Virsh(uri, "capabilities")
	if err != nil {
		t.Fatal(err)
	}
	var cells []virshCell
	for _, m := range virshCellRE.FindAllStringSubmatch(caps, -1) {
		c := virshCell{id: atoi64(m[1]), pages: map[int64]int64{}}
		if mm := virshMemRE.FindStringSubmatch(m[2]); mm != nil {
			c.memoryKiB = atoi64(mm[1])
		}
		for _, p := range virshPagesRE.FindAllStringSubmatch(m[2], -1) {
			c.pages[atoi64(p[1])] = atoi64(p[2])
		}
		for _, cpu := range virshCPURE.FindAllStringSubmatch(m[2], -1) {
			c.cpus = append(c.cpus, atoi64(cpu[1]))
		}
		slices.Sort(c.cpus)
		cells = append(cells, c)
	}
	if len(cells) == 0 {
		t.Fatalf("virsh -c %s capabilities lists no NUMA cells:\n%s", uri, caps)
	}
	for _, c := range cells {
		t.Logf("%s: NUMA cell %d: CPUs %v, %d KiB, pages (KiB: count) %v", uri, c.id, c.cpus, c.memoryKiB, c.pages)
	}
	return cells
}

// virshFreeCell reads one cell's free memory in KiB with `virsh freecell`.
func virshFreeCell(uri string, id int64) (int64, error) {
	out, err := acctest.Virsh(uri, "freecell", "--cellno", strconv.FormatInt(id, 10))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(\d+) KiB`).FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no free memory in virsh freecell output: %q", out)
	}
	return atoi64(m[1]), nil
}

// virshFreePages reads one cell's free pages of one size with `virsh freepages`.
func virshFreePages(uri string, id, sizeKiB int64) (int64, error) {
	out, err := acctest.Virsh(uri, "freepages", "--cellno", strconv.FormatInt(id, 10), "--pagesize", strconv.FormatInt(sizeKiB, 10))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^%dKiB: (\d+)$`, sizeKiB)).FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %d KiB count in virsh freepages output: %q", sizeKiB, out)
	}
	return atoi64(m[1]), nil
}

// expandCPUSet turns "0-3,8" into [0 1 2 3 8].
func expandCPUSet(s string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cpuset %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b <= a {
				return nil, fmt.Errorf("cpuset %q: bad range %q", s, part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// numaCheck compares numa_nodes with what virsh says about the same host:
// cells, CPUs and memory from its capabilities; free memory (within 10% of
// the node's memory, since guests of other tests come and go) from
// `virsh freecell` and free huge pages from `virsh freepages`, both read
// when the check runs.
func numaCheck(t *testing.T, uri, addr string) statecheck.StateCheck {
	var nodes []knownvalue.Check
	for _, c := range virshCells(t, uri) {
		var cpus []knownvalue.Check
		for _, cpu := range c.cpus {
			cpus = append(cpus, knownvalue.Int64Exact(cpu))
		}
		var pages []knownvalue.Check
		sizes := slices.Sorted(maps.Keys(c.pages))
		if len(sizes) > 0 {
			sizes = sizes[1:] // the smallest is the base page
		}
		for _, size := range sizes {
			pages = append(pages, knownvalue.ObjectExact(map[string]knownvalue.Check{
				"size_kib": knownvalue.Int64Exact(size),
				"total":    knownvalue.Int64Exact(c.pages[size]),
				"free": knownvalue.Int64Func(func(v int64) error {
					want, err := virshFreePages(uri, c.id, size)
					if err != nil {
						return err
					}
					if v != want {
						return fmt.Errorf("node %d: %d free %d KiB pages, virsh freepages says %d", c.id, v, size, want)
					}
					return nil
				}),
			}))
		}
		memMiB := c.memoryKiB / 1024
		nodes = append(nodes, knownvalue.ObjectExact(map[string]knownvalue.Check{
			"id":   knownvalue.Int64Exact(c.id),
			"cpus": knownvalue.ListExact(cpus),
			"cpuset": knownvalue.StringFunc(func(v string) error {
				got, err := expandCPUSet(v)
				if err != nil {
					return err
				}
				if !slices.Equal(got, c.cpus) {
					return fmt.Errorf("node %d: cpuset %q is %v, virsh capabilities lists %v", c.id, v, got, c.cpus)
				}
				return nil
			}),
			"memory_mib": knownvalue.Int64Exact(memMiB),
			"free_memory_mib": knownvalue.Int64Func(func(v int64) error {
				kib, err := virshFreeCell(uri, c.id)
				if err != nil {
					return err
				}
				if d := v - kib/1024; v <= 0 || v > memMiB || d > memMiB/10 || d < -memMiB/10 {
					return fmt.Errorf("node %d: %d MiB free, virsh freecell says %d KiB, the node has %d MiB", c.id, v, kib, memMiB)
				}
				return nil
			}),
			"hugepages": knownvalue.ListExact(pages),
		}))
	}
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("numa_nodes"), knownvalue.ListExact(nodes))
}

// gpusCheck compares gpus with the display-class PCI functions virsh lists
// on the same host (class 0x03xxxx in nodedev-dumpxml), in address order.
func gpusCheck(t *testing.T, uri, addr string) statecheck.StateCheck {
	t.Helper()
	list, err := acctest.Virsh(uri, "nodedev-list", "--cap", "pci")
	if err != nil {
		t.Fatal(err)
	}
	field := func(doc, re string) string {
		if m := regexp.MustCompile(re).FindStringSubmatch(doc); m != nil {
			return m[1]
		}
		return ""
	}
	optInt := func(s string) knownvalue.Check {
		if s == "" {
			return knownvalue.Null()
		}
		return knownvalue.Int64Exact(atoi64(s))
	}
	names := strings.Fields(list)
	slices.Sort(names)
	gpus := []knownvalue.Check{}
	for _, name := range names {
		doc, err := acctest.Virsh(uri, "nodedev-dumpxml", name)
		if err != nil {
			t.Fatal(err)
		}
		class := field(doc, `<class>0x(03[0-9a-f]{4})</class>`)
		if class == "" {
			continue
		}
		p := strings.Split(strings.TrimPrefix(name, "pci_"), "_")
		gpus = append(gpus, knownvalue.ObjectPartial(map[string]knownvalue.Check{
			"address":     knownvalue.StringExact(fmt.Sprintf("%s:%s:%s.%s", p[0], p[1], p[2], p[3])),
			"class":       knownvalue.StringExact(class),
			"vendor_id":   knownvalue.StringExact(field(doc, `<vendor id='0x([0-9a-f]{4})'`)),
			"product_id":  knownvalue.StringExact(field(doc, `<product id='0x([0-9a-f]{4})'`)),
			"driver":      knownvalue.StringExact(field(doc, `(?s)<driver>\s*<name>([^<]+)</name>`)),
			"iommu_group": optInt(field(doc, `<iommuGroup number='(\d+)'`)),
			"numa_node":   optInt(field(doc, `<numa node='(\d+)'`)),
		}))
	}
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("gpus"), knownvalue.ListExact(gpus))
}
